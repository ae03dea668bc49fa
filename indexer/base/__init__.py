"""The bottom layer, which every other imports: errors (one line each, secrets scrubbed), the
named states of a job and a claim, the job kinds and a block range's payload, settings,
connections and migrations, logging, signals, and the metrics each process counts.
"""

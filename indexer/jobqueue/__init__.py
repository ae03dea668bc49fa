"""The `jobs` table as a queue: every statement that moves a job through its life (`queue`), what
the table holds (`queue_counts`), the claims a worker holds and how a claim ends (`claims`),
progress and the retention of finished jobs. Nothing here knows what a job does.
"""

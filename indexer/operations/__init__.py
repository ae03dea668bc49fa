"""Running and watching it: the worker process (`worker`) and the pool of them (`pool`, its
progress line, its health checks), following the head (`follow`, `follow_state`) and rolling
back reorgs (`rollback`), `indexer verify` (`verify`, `verify_node`), `indexer status`, and the
Prometheus exporter.
"""

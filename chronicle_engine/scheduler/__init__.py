"""Hook-driven scheduling: consolidation and maintenance with no daemon or timer.

`core.scheduler` is a `Scheduler` (`scheduler.py`). The slot adapters call `tick(hook)` on every
host hook (cheap when nothing is due); what is due runs on one background thread per process
(`worker.py`), or on the hook's thread with `maintenance.background: false`, and only when a hook
asks. `maintenance_status()` reports what ran, what is due and what is left. The package imports
none of its modules: opening a core registers the scheduler's events (`events.py`) without
loading the scheduler, which the first hook builds.
"""

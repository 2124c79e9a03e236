"""Hook-driven scheduling: consolidation and maintenance with no daemon or timer.

`core.scheduler` is a `Scheduler` (`scheduler.py`). The slot adapters call `tick(hook)` on every
host hook (cheap when nothing is due); what is due runs on the scheduler's own background thread
(`worker.py`; the slots tick one scheduler per database), or on the hook's thread with `maintenance.background: false`, and only when a hook
asks. `maintenance_status()` reports what ran, what is due and what is left. The package imports
none of its modules: opening a core registers the scheduler's events (`events.py`) without
loading the scheduler, which the first hook builds.
"""

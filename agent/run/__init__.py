"""A run directory and everything frozen in it; the only code that names its files.

rundir       RunDir: the layout (manifest, parent pointer, ledger, audit files, proposals,
             checkpoints, evaluations, steps, report, heat map, run.lock) and its readers
manifest     the frozen, hashed Manifest (typed) and the endpoint split
promotion    parent.json: the promotion pointer with its rollback target
runlock      run.lock: a live process's hold on a run directory
checkpoints  the checkpointer's JSON-only serializer and what a checkpoint database records
audit        decisions.jsonl and outcomes.jsonl, written once per decision
killpoints   the kill -9 test hook
"""

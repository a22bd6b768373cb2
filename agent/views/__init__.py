"""Read-only views of a run directory and typed records: they decide nothing and run no model.

report    runs/ID/report.md and report.html
charts    the report's matplotlib figures
timing    where the wall-clock went (ledger charges and checkpoint times)
tracking  the MLflow mirror of an episode and of `agent compare`
"""

"""Accuracy-vs-size sweeps for CI: `tinyaot sweep` runs one model over a grid of compression settings (each setting
measured by the same `evaluate` and `deploy` calls a user would run by hand), writes report.json / report.md /
report.html and Pareto plots; `tinyaot compare` is the gate between two such reports.

Modules: grid (the settings), run (one setting, the cache, the executors), report (the files), compare (the gate).
"""

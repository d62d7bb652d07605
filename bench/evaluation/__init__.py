"""The DiscNice evaluation (issue #3), one module per experiment.

bench/evaluate.py runs them in paper order; every module exposes
``run(ctx) -> list[str]`` (markdown lines) and draws its own PNG plots.
Shared pieces: util (sampling, statistics, formatting, plots), workspace
(the files every experiment reads), background (rsync and the kernel's
controls) and kernel (the BFQ switch and the cgroup-v1 blkio throttle).
"""

"""Benchmarks: each module prints numbers; `python -m bench` lists them."""

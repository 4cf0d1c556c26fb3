"""numpy's BLAS is held to one thread once the stages are loaded (edge_rt/backends/threads.py)."""

from __future__ import annotations

from threadpoolctl import threadpool_info

from edge_rt.pipeline import load_stages


def test_loading_the_stages_caps_numpys_blas_at_one_thread(tiny_pack):
    load_stages(tiny_pack)
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    assert blas, "numpy's BLAS was not found: nothing to cap"
    assert all(i["num_threads"] == 1 for i in blas), blas

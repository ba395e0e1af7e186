"""hvx.torch tests run on every rank of one job (hvxrun -np N -- python3 -m pytest ...), every
rank running the same tests in the same order. hvx is initialized once for the session: it cannot
be initialized again after shutdown."""
import os

import pytest
import torch

import hvx.torch as hvd


def pytest_configure(config):
    # Before init: the error a script without hvd.init() gets.
    try:
        hvd.size()
    except ValueError as e:
        os.environ["HVX_TEST_NOT_INITIALIZED_ERROR"] = str(e)
    hvd.init()
    torch.set_num_threads(1)


def pytest_unconfigure(config):
    hvd.shutdown()


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()

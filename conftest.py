"""pytest set-up for the whole run (tests and doctests): one torch thread for the session.

Small nets train and predict faster on one thread, and a test then does not fight other
processes for the cores (with two threads on a busy 2-core machine one SVI step can take ten
times longer). Session scope: module-scoped fixtures that train a model run on one thread too.
"""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

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


#: Doctests whose examples train for a few epochs on purpose (the UCI harness's, on a toy data
#: set of 40 rows): the library rightly warns that such a fit predicts its training targets
#: poorly. The examples check values and shapes, not fit quality; that warning is expected.
FEW_EPOCH_DOCTESTS = ("benchmarks/uci/",)


def pytest_collection_modifyitems(config, items):
    expected = pytest.mark.filterwarnings("ignore::bnn_pyro.exceptions.TrainingInstabilityWarning")
    for item in items:
        where = str(item.path.relative_to(config.rootpath)) if item.path else ""
        if type(item).__name__ == "DoctestItem" and where.startswith(FEW_EPOCH_DOCTESTS):
            item.add_marker(expected)

import pytest

from tests.scheduling.conftest import make_cluster


@pytest.fixture(autouse=True)
def eager_tasks(eager_celery):
    """Dispatch tasks run in-process."""


@pytest.fixture
def cluster(db, budget_tree, tmp_path):
    return make_cluster(tmp_path)

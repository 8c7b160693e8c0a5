"""Array elements within MaxArraySize (the highest index) and MaxJobCount."""

from __future__ import annotations

import pytest

from storekit.errors import StorekitError
from storekit.slurm.batches import ClusterLimits, ElementMap, as_runs, limits_from_config, map_elements

BIG = ClusterLimits(max_array_size=1001, max_job_count=10000)


def covered(em: ElementMap) -> list[int]:
    return [t for e in range(em.elements) for t in em.tasks_of(e)]


def test_limits_are_read_from_scontrol_show_config_with_slurm_defaults() -> None:
    limits = limits_from_config({"MaxArraySize": "7", "MaxJobCount": "50"})
    assert (limits.max_array_size, limits.max_job_count) == (7, 50)
    assert limits_from_config({}) == ClusterLimits(1001, 10000)
    assert ClusterLimits(max_array_size=1001, max_job_count=10).max_elements == 4  # half, less finalize


def test_one_task_per_element_when_it_fits() -> None:
    em = map_elements(range(42), per_element=1, limits=BIG)
    assert (em.elements, em.per_element, em.array_spec) == (42, 1, "0-41")
    assert em.tasks_of(41) == [41]
    assert covered(em) == list(range(42))


def test_more_tasks_than_max_array_size_share_elements_below_the_highest_index() -> None:
    limits = ClusterLimits(max_array_size=4, max_job_count=10000)
    em = map_elements(range(10), per_element=1, limits=limits)
    assert em.elements <= 4 and em.per_element == 3
    assert em.array_spec == f"0-{em.elements - 1}" and em.elements - 1 < 4
    assert covered(em) == list(range(10))  # every task once, in order


def test_ten_thousand_tasks_fit_one_array_and_the_map_stays_small() -> None:
    em = map_elements(range(10_000), per_element=1, limits=BIG)
    assert em.elements <= 1001 and covered(em) == list(range(10_000))
    assert em.runs == ((0, 10_000),)
    assert ElementMap.from_dict(em.to_dict()) == em


def test_a_rerun_of_scattered_tasks_keeps_exactly_those() -> None:
    todo = [3, 4, 5, 9, 17, 18, 40]
    assert as_runs(todo) == ((3, 6), (9, 10), (17, 19), (40, 41))
    em = map_elements(todo, per_element=2, limits=BIG)
    assert covered(em) == todo and em.elements == 4
    with pytest.raises(StorekitError):
        em.tasks_of(4)


def test_nothing_to_submit_is_an_error() -> None:
    with pytest.raises(StorekitError, match="nothing to submit"):
        map_elements([], per_element=1, limits=BIG)

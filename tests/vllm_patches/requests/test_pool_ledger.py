"""vllm_patches.requests.pool_ledger and the scheduler hooks around it, on a stand-in scheduler: the scheduler's share
of
the drafter's x_full pool."""

import types

from vllm_patches.hooks import scheduler_patch
from vllm_patches.hooks.scheduler_patch import STATE_ATTR, RequestState, SchedulerState
from vllm_patches.requests.pool_ledger import PoolLedger
from vllm_patches.requests.request_args import EngineFacts


def test_waiting_requests_that_do_not_fit_are_held_in_queue_order():
    """10 blocks, 4 reserved: of the waiting a (3), b (4), c (2), d (0) and e (already reserved: a resumed one),
    a and c fit what is left (6), b does not; d needs nothing and e holds its blocks already."""
    pool = PoolLedger(10, 16, reserved={"e": 4})
    assert pool.free == 6
    assert pool.held_back([("a", 3), ("b", 4), ("c", 2), ("d", 0), ("e", 4)]) == {"b"}
    assert pool.free == 6  # holding back reserves nothing


def test_reserved_from_admission_to_release_with_its_peak():
    pool = PoolLedger(10, 16)
    pool.admit("a", 3)
    pool.admit("b", 5)
    pool.admit("c", 0)  # a request without an x_full view holds nothing
    assert pool.reserved == {"a": 3, "b": 5} and pool.free == 2 and pool.peak == 8
    pool.release("a")
    pool.release(
        "a"
    )  # a request freed twice (finished, then aborted) gives its blocks back once
    assert pool.reserved == {"b": 5} and pool.free == 5 and pool.peak == 8
    assert pool.could_ever_fit(10) and not pool.could_ever_fit(11)


class Waiting(list):
    def remove_requests(self, requests):
        for r in requests:
            self.remove(r)

    def prepend_request(self, request):
        self.insert(0, request)


def scheduler_with(pool, waiting):
    return types.SimpleNamespace(
        vllm_config=types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(method="asymspec")
        ),
        asymspec=SchedulerState(
            EngineFacts(K=2, vocab_size=10, max_model_len=64), pool
        ),
        waiting=Waiting(waiting),
        requests={r.request_id: r for r in waiting},
        running=[],
        max_num_scheduled_tokens=8192,
    )  # room for all


def waiting_request(req_id, blocks):
    request = types.SimpleNamespace(request_id=req_id)
    setattr(request, STATE_ATTR, RequestState(2, "asymspec", False, blocks))
    return request


def test_schedule_never_reserves_more_than_the_pool_and_gives_the_held_back_their_places():
    """vLLM's schedule sees only the requests that fit; what it schedules is reserved; the held-back ones are
    back at their places in the queue afterwards; a freed request's blocks are free again."""
    a, b, c = waiting_request("a", 6), waiting_request("b", 6), waiting_request("c", 3)
    scheduler = scheduler_with(PoolLedger(10, 16), [a, b, c])
    seen = []

    def schedule(s):
        seen.append([r.request_id for r in s.waiting])
        scheduled = list(s.waiting)
        s.waiting[:] = []
        return types.SimpleNamespace(
            scheduled_new_reqs=[
                types.SimpleNamespace(req_id=r.request_id) for r in scheduled
            ]
        )

    scheduler_patch.schedule(schedule, scheduler)
    pool = scheduler.asymspec.pool
    assert seen == [["a", "c"]] and [r.request_id for r in scheduler.waiting] == ["b"]
    assert pool.reserved == {"a": 6, "c": 3} and pool.peak == 9 <= pool.usable
    scheduler_patch.free_request(lambda s, r, delay: None, scheduler, a)
    assert pool.reserved == {"c": 3}
    scheduler_patch.schedule(schedule, scheduler)
    assert seen[-1] == ["b"] and pool.reserved == {"c": 3, "b": 6} and pool.peak == 9

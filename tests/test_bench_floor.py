"""The measuring tools behind bench/results/mutate-plan.md: the plan stream is planned at every review,
and the floor answers what /mutate answers."""

from __future__ import annotations

from bench.floor import constant_route
from bench.instructions import UID, stream
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.injection.answers import Answers


def test_the_plan_stream_finds_no_remembered_answer_and_the_replica_stream_does() -> None:
    for kind, misses in (("plan", 50), ("replica", 1)):
        answers = Answers()
        route = make_mutate_handler(InjectionOptions(), answers=answers)
        for body in stream(50, new=False, plan=kind == "plan"):
            assert "patch" in route.answer(body)
        assert (answers.misses, answers.hits) == (misses, 50 - misses), kind


def test_the_floor_answers_what_mutate_answers_to_the_plan_streams_first_review() -> None:
    body = stream(1, new=False, plan=True)[0]
    route = constant_route()
    request = route.decode(b"anything")
    assert route.handle(request) == make_mutate_handler(InjectionOptions()).answer(body)
    assert route.handle(request)["uid"] == request.uid == UID  # the first review's uid, echoed as the apiserver checks

"""The CLI's token goes only to the origin the user logged in to: the same scheme, host and
port. A ``next`` link to another port of the same host (any local service) or to plain http
(anyone on the path) carried the token there."""

import httpx
import pytest
from allot_cli.client import Client
from allot_cli.errors import Refused

BASE = "https://allot.example.org"
FIRST = f"{BASE}/api/v1/jobs/"


def client_for(next_link: str, seen: list[str]) -> Client:
    def answer(request):
        seen.append(str(request.url))
        if str(request.url) == FIRST:
            return httpx.Response(200, json={"results": [1], "next": next_link})
        return httpx.Response(200, json={"results": [2], "next": None})

    return Client(BASE, "t", transport=httpx.MockTransport(answer))


@pytest.mark.parametrize(
    "next_link",
    [
        "https://allot.example.org:8443/api/v1/jobs/?offset=1",
        "http://allot.example.org/api/v1/jobs/?offset=1",
        "http://allot.example.org:443/api/v1/jobs/?offset=1",
        "//elsewhere.example/api/v1/jobs/",
        "https://elsewhere.example/steal",
    ],
)
def test_a_next_link_to_another_origin_is_refused_before_any_request(next_link):
    seen: list[str] = []
    with pytest.raises(Refused, match="another"):
        client_for(next_link, seen).get_all("/api/v1/jobs/")
    assert seen == [FIRST]


@pytest.mark.parametrize(
    "next_link",
    [
        "https://allot.example.org/api/v1/jobs/?offset=1",
        "https://allot.example.org:443/api/v1/jobs/?offset=1",
        "https://ALLOT.example.org/api/v1/jobs/?offset=1",
        "/api/v1/jobs/?offset=1",
    ],
)
def test_a_next_link_on_the_same_origin_is_followed(next_link):
    seen: list[str] = []
    assert client_for(next_link, seen).get_all("/api/v1/jobs/") == [1, 2]

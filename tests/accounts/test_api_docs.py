"""The Swagger UI is behind a login and its assets are served by Allot itself."""

import pytest


@pytest.mark.django_db
def test_the_api_docs_need_a_login(client):
    response = client.get("/api/docs/")
    assert response.status_code == 302
    assert "/login/" in response["Location"]


@pytest.mark.django_db
def test_the_schema_needs_a_login(client):
    assert client.get("/api/schema/").status_code in {401, 403}


def test_the_api_docs_load_swagger_from_our_static_files(client, researcher):
    client.force_login(researcher)
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in html
    assert "cdn.jsdelivr.net" not in html and "unpkg.com" not in html

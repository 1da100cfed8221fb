import pytest


@pytest.mark.django_db
def test_home_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert "/login/" in response["Location"]


@pytest.mark.django_db
def test_healthz_answers(client):
    assert client.get("/healthz").json()["database"] == "ok"


@pytest.mark.django_db
def test_openapi_schema_is_served(admin_client):
    response = admin_client.get("/api/schema/")
    assert response.status_code == 200
    assert b"openapi" in response.content


@pytest.mark.django_db
def test_token_endpoint_names_the_bad_field(client):
    response = client.post("/api/v1/auth/token/", {"username": "nobody"})
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "password"
    assert "password" in body["message"]

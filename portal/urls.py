from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from portal import account, views
from portal.api_auth import obtain_token
from portal.metrics import metrics_view
from portal.sso import views as sso_views

api_v1 = [
    path("auth/token/", obtain_token, name="api-token"),
    path("", include("budgets.api_urls")),
    path("", include("scheduling.api_urls")),
    path("", include("exceptions.api_urls")),
    path("", include("whatif.api_urls")),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("login/", sso_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("oidc/login/", sso_views.SignIn.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", sso_views.Callback.as_view(), name="oidc_authentication_callback"),
    path("admin/login/", sso_views.admin_login),  # before admin.site.urls, which has its own
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/",
        login_required(SpectacularSwaggerView.as_view(url_name="schema")),
        name="swagger-ui",
    ),
    path("account/tokens/", account.token_list, name="account-tokens"),
    path("account/tokens/new/", account.token_new, name="account-token-new"),
    path("account/tokens/<str:key>/revoke/", account.token_revoke, name="account-token-revoke"),
    path("", include("budgets.urls")),
    path("", include("scheduling.urls")),
    path("", include("exceptions.urls")),
    path("", include("whatif.urls")),
]

from django.urls import path

from whatif import views

urlpatterns = [
    path("budgets/preview/", views.preview_page, name="whatif-page"),
    path("budgets/preview/simulate/", views.simulate, name="whatif-simulate"),
    path("budgets/preview/<int:pk>/", views.preview_detail, name="whatif-page-detail"),
    path("budgets/preview/<int:pk>/apply/", views.apply, name="whatif-apply"),
]

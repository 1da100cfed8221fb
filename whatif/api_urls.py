from django.urls import path

from whatif.api import PreviewCreateView, PreviewDetailView

urlpatterns = [
    path("whatif/", PreviewCreateView.as_view(), name="whatif-create"),
    path("whatif/<int:pk>/", PreviewDetailView.as_view(), name="whatif-detail"),
]

import os

from django.core.wsgi import get_wsgi_application

from portal.secret import require_secret_key

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# gunicorn, any WSGI server and runserver load this module: none of them serves without a key.
require_secret_key()
application = get_wsgi_application()

"""The HTTP edge: the Flask app and its route groups (search, clicks and rewards, the
operator's endpoints, the browser snippet and CORS), its waitress server, the WSGI entry point
for gunicorn, request validation and the OpenAPI document. Imports serving and below."""

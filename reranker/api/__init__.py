"""The HTTP edge: the Flask app and its server, the WSGI entry point for gunicorn, request
validation and the OpenAPI document, and the browser snippet. Imports serving and below."""

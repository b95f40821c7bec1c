"""Pages for people: the account page (``app.ui.pages``), server-rendered HTML with an SVG
chart (``app.ui.chart``) from Jinja2 templates (``app.ui.templates``)."""

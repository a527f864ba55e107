"""`grader review`: the pages on which teaching assistants grade written answers by rubric, question by question.

A Starlette app (app.py) served by uvicorn; its pages are Jinja2 templates (templates/), its one script and style
sheet static files (static/). What it stores is grader/batch/manual.py's: this package only shows and asks."""

"""The operator console: the content-free diagnostics API and its CLI, the dashboard, the
operator commands and the admin's templates. It reads every app, and no app reads it."""

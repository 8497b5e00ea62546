#!/usr/bin/env python
"""Django's command-line utility for ctxadmin."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line
    from django.db.utils import OperationalError

    try:
        execute_from_command_line(sys.argv)
    except OperationalError:
        message = _database_down_message()
        if message is None:
            raise
        sys.stderr.write(message + "\n")
        sys.exit(1)


def _database_down_message() -> str | None:
    """One line for an operator when the database does not answer at all (None when it does:
    the error was something else, and its traceback is worth reading)."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    options = {key: value for key, value in db["OPTIONS"].items() if key != "pool"}
    options["connect_timeout"] = 2
    try:
        psycopg.connect(
            host=db["HOST"],
            port=db["PORT"] or None,
            dbname=db["NAME"],
            user=db["USER"],
            password=db["PASSWORD"],
            **options,
        ).close()
    except psycopg.OperationalError:
        where = f"{db['HOST']}:{db['PORT']}/{db['NAME']}"
        if os.environ.get("DATABASE_URL"):
            return f"ctxadmin: the database at DATABASE_URL ({where}) does not answer"
        return (
            "ctxadmin is not running here: `make run` "
            f"(its database, last at {where}, does not answer)"
        )
    return None


if __name__ == "__main__":
    main()

"""``manage.py check --deploy`` passes with the settings documented for production."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from ctxadmin import stack


def _check_deploy(**env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "SECRET_KEY": secrets.token_urlsafe(64), **env}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=stack.PROJECT_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_deploy_passes_with_the_production_settings():
    done = _check_deploy(
        ALLOWED_HOSTS="ctx.example.com",
        CTXADMIN_HTTPS="true",
        CTXADMIN_BEHIND_PROXY="true",
        CTXADMIN_HSTS_INCLUDE_SUBDOMAINS="true",
        CTXADMIN_HSTS_PRELOAD="true",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_without_https_it_says_what_is_missing():
    done = _check_deploy(ALLOWED_HOSTS="ctx.example.com")
    assert done.returncode != 0
    assert "SECURE_SSL_REDIRECT" in done.stderr + done.stdout

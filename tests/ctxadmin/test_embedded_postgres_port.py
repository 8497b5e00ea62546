"""Two checkouts starting their embedded PostgreSQL at once can both find the preferred port
free and race for it: the loser starts again on another port instead of failing."""

from __future__ import annotations

import socket

import psycopg

from ctxadmin import stack


def test_a_port_taken_after_the_check_is_retried_on_another(tmp_path, monkeypatch):
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    # The race: the port looked free when checked, and was taken before PostgreSQL bound it.
    monkeypatch.setattr(stack, "port_is_free", lambda port, host="127.0.0.1": True)
    postgres = stack.EmbeddedPostgres(tmp_path / "pgdata", preferred_port=taken)
    try:
        url = postgres.start()
        assert postgres.port != taken
        with psycopg.connect(url, connect_timeout=5) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
        assert b"Address already in use" in postgres.log_file.read_bytes()
    finally:
        postgres.stop()
        holder.close()

"""``flask --app webapi tome-keys create|list|priority|revoke``: mint and manage API keys (only hashes are
stored).

The commands need the database and nothing else, so they are registered twice: on the app (``app.cli``,
which Flask's test runner and an app-provided CLI use) and as a ``flask.commands`` plugin (pyproject.toml),
which Flask's command line finds without building the app. A key is then minted in a fraction of a second
instead of the seconds that importing every blueprint, the audio stack and Celery takes.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import click
from flask import Flask
from sqlalchemy import Engine, select
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from models import ApiKey, Role, generate_key, hash_key, make_engine, unit_of_work, utcnow
from models.db import make_session_factory
from webapi.controls import control_character, describe
from worker.config import ConfigError, load_settings

PRIORITY = click.IntRange(1, 100)


def _one_line(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """An owner or key name: printed by `list` and in logs, so no control characters (webapi.controls)."""
    found = control_character(value)
    if found is not None:
        raise click.BadParameter(f"contains the control character {describe(found[1])}")
    return value


def mint_key(app: Flask, owner: str, name: str, admin: bool, priority: int = 1) -> str:
    """Create a key with ``app``'s database and return it (the only time the key itself exists)."""
    from webapi.extensions import tome

    with app.app_context():
        return mint_key_in(tome().db, owner, name, admin, priority)


def mint_key_in(db: Engine, owner: str, name: str, admin: bool, priority: int = 1) -> str:
    """Create a key in the database ``db`` and return it."""
    key = generate_key()
    with unit_of_work(make_session_factory(db)) as session:
        session.add(
            ApiKey(
                name=name,
                owner=owner,
                key_sha256=hash_key(key),
                role=(Role.ADMIN if admin else Role.USER).value,
                priority=priority,
            )
        )
    return key


def register_cli(app: Flask) -> None:
    """``tome-keys`` on ``app.cli``, on the app's own database."""
    from webapi.extensions import tome

    group = app.cli.group("tome-keys")(_manage_keys)
    _add_commands(group, lambda: tome().db)


def _settings_database() -> Engine:
    """The database the ``TOME_*`` settings name (the plugin's commands run without an app)."""
    try:
        return make_engine(load_settings().sqlalchemy_url)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _manage_keys() -> None:
    """Manage API keys."""


def _add_commands(group: click.Group, database: Callable[[], Engine]) -> None:
    @group.command("create")
    @click.option(
        "--owner",
        default="default",
        show_default=True,
        callback=_one_line,
        help="Account the key acts for; its voices and jobs.",
    )
    @click.option(
        "--name", default="default", show_default=True, callback=_one_line, help="A label for this key."
    )
    @click.option("--admin", is_flag=True, help="Allow the admin endpoints.")
    @click.option(
        "--priority",
        type=PRIORITY,
        default=1,
        show_default=True,
        help="Weight of its jobs in fair scheduling.",
    )
    def create(owner: str, name: str, admin: bool, priority: int) -> None:
        """Mint a key and print it once (its webhook secret goes to stderr)."""
        db = database()
        with _migrated(db):
            key = mint_key_in(db, owner, name, admin, priority)
            with Session(db) as session:
                secret = session.scalar(
                    select(ApiKey.webhook_secret).where(ApiKey.key_sha256 == hash_key(key))
                )
        click.echo(key)
        click.echo(f"webhook secret: {secret}", err=True)

    @group.command("list")
    def list_keys() -> None:
        """Show keys (never the keys themselves)."""
        db = database()
        with _migrated(db), Session(db) as session:
            for key in session.scalars(select(ApiKey).order_by(ApiKey.created_at)):
                revoked = f" revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else ""
                click.echo(f"{key.id}  {key.owner:<20} {key.name:<20} {key.role:<5} p{key.priority}{revoked}")

    @group.command("priority")
    @click.argument("key_id")
    @click.argument("priority", type=PRIORITY)
    def set_priority(key_id: str, priority: int) -> None:
        """Set the weight of a key's jobs when render slots are shared between owners (1-100)."""
        db = database()
        with _migrated(db), unit_of_work(make_session_factory(db)) as session:
            key = session.get(ApiKey, _key_id(key_id))
            if key is None:
                raise click.ClickException(f"no key {key_id}")
            key.priority = priority
        click.echo(f"key {key_id}: priority {priority}")

    @group.command("revoke")
    @click.argument("key_id")
    def revoke(key_id: str) -> None:
        """Revoke a key by its id (from `list`)."""
        db = database()
        with _migrated(db), unit_of_work(make_session_factory(db)) as session:
            key = session.get(ApiKey, _key_id(key_id))
            if key is None:
                raise click.ClickException(f"no key {key_id}")
            key.revoked_at = utcnow()
        click.echo(f"revoked {key_id}")


@contextlib.contextmanager
def _migrated(db: Engine) -> Iterator[None]:
    """Database errors as what to do about them: a database that is not there, or not migrated yet."""
    try:
        yield
    except (OperationalError, ProgrammingError) as exc:
        where = db.url.render_as_string(hide_password=True)
        cause = str(exc.orig).splitlines()[0] if exc.orig else str(exc)
        advice = "start Tome once (make run) or apply the migrations (make migrate)"
        raise click.ClickException(f"the database {where}: {cause}; {advice}") from exc


def _key_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError as exc:
        raise click.ClickException(f"{text!r} is not a key id (see `tome-keys list`)") from exc


# The ``flask.commands`` plugin (pyproject.toml): the same commands on the database the settings name.
keys = click.Group("tome-keys", help="Manage API keys.")
_add_commands(keys, _settings_database)

"""``flask --app webapi tome-keys create|list|revoke``: mint and manage API keys (only hashes are stored)."""

from __future__ import annotations

import uuid

import click
from flask import Flask
from sqlalchemy import select

from models import ApiKey, Role, generate_key, hash_key, unit_of_work, utcnow
from models.db import make_session_factory
from webapi.extensions import tome
from webapi.text import control_character, describe

PRIORITY = click.IntRange(1, 100)


def _one_line(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """An owner or key name: printed by `list` and in logs, so no control characters (webapi.text)."""
    found = control_character(value)
    if found is not None:
        raise click.BadParameter(f"contains the control character {describe(found[1])}")
    return value


def mint_key(app: Flask, owner: str, name: str, admin: bool, priority: int = 1) -> str:
    """Create a key and return it; this is the only time the key itself exists anywhere."""
    key = generate_key()
    with app.app_context(), unit_of_work(make_session_factory(tome().db)) as session:
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
    @app.cli.group("tome-keys")
    def keys() -> None:
        """Manage API keys."""

    @keys.command("create")
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
        key = mint_key(app, owner, name, admin, priority)
        secret = tome().sessions.scalar(
            select(ApiKey.webhook_secret).where(ApiKey.key_sha256 == hash_key(key))
        )
        click.echo(key)
        click.echo(f"webhook secret: {secret}", err=True)

    @keys.command("list")
    def list_keys() -> None:
        """Show keys (never the keys themselves)."""
        for key in tome().sessions.scalars(select(ApiKey).order_by(ApiKey.created_at)):
            revoked = f" revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else ""
            click.echo(f"{key.id}  {key.owner:<20} {key.name:<20} {key.role:<5} p{key.priority}{revoked}")

    @keys.command("priority")
    @click.argument("key_id")
    @click.argument("priority", type=PRIORITY)
    def set_priority(key_id: str, priority: int) -> None:
        """Set the weight of a key's jobs when render slots are shared between owners (1-100)."""
        key = tome().sessions.get(ApiKey, _key_id(key_id))
        if key is None:
            raise click.ClickException(f"no key {key_id}")
        key.priority = priority
        tome().sessions.commit()
        click.echo(f"key {key_id}: priority {priority}")

    @keys.command("revoke")
    @click.argument("key_id")
    def revoke(key_id: str) -> None:
        """Revoke a key by its id (from `list`)."""
        key = tome().sessions.get(ApiKey, _key_id(key_id))
        if key is None:
            raise click.ClickException(f"no key {key_id}")
        key.revoked_at = utcnow()
        tome().sessions.commit()
        click.echo(f"revoked {key_id}")


def _key_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError as exc:
        raise click.ClickException(f"{text!r} is not a key id (see `tome-keys list`)") from exc

"""``flask --app webapi tome-keys create|list|revoke``: mint and manage API keys (only hashes are stored)."""

from __future__ import annotations

import uuid

import click
from flask import Flask
from sqlalchemy import select

from models import ApiKey, Role, generate_key, hash_key, unit_of_work, utcnow
from models.db import make_session_factory
from webapi.extensions import tome


def mint_key(app: Flask, owner: str, name: str, admin: bool) -> str:
    """Create a key and return it; this is the only time the key itself exists anywhere."""
    key = generate_key()
    with app.app_context(), unit_of_work(make_session_factory(tome().db)) as session:
        session.add(
            ApiKey(
                name=name,
                owner=owner,
                key_sha256=hash_key(key),
                role=(Role.ADMIN if admin else Role.USER).value,
            )
        )
    return key


def register_cli(app: Flask) -> None:
    @app.cli.group("tome-keys")
    def keys() -> None:
        """Manage API keys."""

    @keys.command("create")
    @click.option(
        "--owner", default="default", show_default=True, help="Account the key acts for; its voices and jobs."
    )
    @click.option("--name", default="default", show_default=True, help="A label for this key.")
    @click.option("--admin", is_flag=True, help="Allow the admin endpoints.")
    def create(owner: str, name: str, admin: bool) -> None:
        """Mint a key and print it once (its webhook secret goes to stderr)."""
        key = mint_key(app, owner, name, admin)
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
            click.echo(f"{key.id}  {key.owner:<20} {key.name:<20} {key.role}{revoked}")

    @keys.command("revoke")
    @click.argument("key_id")
    def revoke(key_id: str) -> None:
        """Revoke a key by its id (from `list`)."""
        key = tome().sessions.get(ApiKey, uuid.UUID(key_id))
        if key is None:
            raise click.ClickException(f"no key {key_id}")
        key.revoked_at = utcnow()
        tome().sessions.commit()
        click.echo(f"revoked {key_id}")

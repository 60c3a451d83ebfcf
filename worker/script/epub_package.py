"""An EPUB's package: where the OPF is, its metadata, manifest, spine and guide, DRM, and the table of
contents (EPUB 3 navigation document or EPUB 2 NCX) (pure).

Element names are matched without their namespace: sloppy packages omit or misspell namespaces, and the
names alone are unambiguous here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree

from .document import BookInfo
from .epub_matter import guide_type
from .epub_xml import EPUB_TYPE, children, descendants, epub_types, local_name, parse_xml, text_of
from .epub_zip import Archive, resolve
from .errors import ScriptError

CONTAINER = "META-INF/container.xml"
ENCRYPTION = "META-INF/encryption.xml"
_OPF_MEDIA_TYPE = "application/oebps-package+xml"
_NCX_MEDIA_TYPE = "application/x-dtbncx+xml"
# Font obfuscation (IDPF and Adobe) in encryption.xml is not DRM: it only scrambles embedded fonts.
_FONT_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})
# Files whose encryption makes the book unreadable, by extension (before the manifest is known).
_CONTENT_EXTENSIONS = (".xhtml", ".html", ".htm", ".xml", ".opf", ".ncx")
_MAX_META = 1000  # characters of a title or author kept
_MAX_CREATORS = 20


@dataclass(frozen=True)
class ManifestItem:
    path: str  # zip path
    media_type: str
    properties: frozenset[str]


@dataclass(frozen=True)
class SpineItem:
    path: str
    media_type: str
    linear: bool


@dataclass(frozen=True)
class Landmark:
    """A guide reference or nav landmark: what the page at ``path#fragment`` is (an epub:type)."""

    path: str
    fragment: str
    type: str


@dataclass(frozen=True)
class TocEntry:
    """A table-of-contents entry, flattened: its title and where it points (``path`` "" if it is a
    heading without a link)."""

    title: str
    path: str
    fragment: str


@dataclass
class Package:
    path: str  # the OPF's zip path
    info: BookInfo
    spine: list[SpineItem]
    nav: str | None  # the EPUB 3 navigation document's zip path
    ncx: str | None
    guide: list[Landmark] = field(default_factory=list)


def check_mimetype(archive: Archive) -> None:
    if CONTAINER not in archive:
        raise ScriptError(f"not an EPUB: {CONTAINER} is missing")
    if "mimetype" in archive:
        mimetype = archive.read("mimetype").strip()
        if mimetype != b"application/epub+zip":
            shown = mimetype[:60].decode("ascii", "replace")
            raise ScriptError(f"not an EPUB: its mimetype is {shown!r}, not application/epub+zip")


def opf_path(archive: Archive) -> str:
    """The zip path of the package document, from META-INF/container.xml."""
    root = parse_xml(archive.read(CONTAINER), CONTAINER, "container")
    rootfiles = descendants(root, "rootfile")
    chosen = [r for r in rootfiles if r.get("media-type") == _OPF_MEDIA_TYPE] or rootfiles
    path = chosen[0].get("full-path") if chosen else None
    if not path:
        raise ScriptError(f"not an EPUB: {CONTAINER} names no package document")
    resolved, _ = resolve("", path)
    if resolved not in archive:
        raise ScriptError(f"not an EPUB: the package document {path!r} is missing")
    return resolved


def check_drm(archive: Archive, content: set[str]) -> None:
    """Refuse a book whose content documents are encrypted (DRM). Only font obfuscation is allowed.

    ``content``: zip paths known to be content (the spine, the OPF, the TOC); before the manifest is read
    any XHTML, XML, OPF or NCX file counts."""
    if ENCRYPTION not in archive:
        return
    root = parse_xml(archive.read(ENCRYPTION), ENCRYPTION, "encryption.xml")
    for encrypted in descendants(root, "EncryptedData"):
        methods = descendants(encrypted, "EncryptionMethod")
        algorithm = methods[0].get("Algorithm", "") if methods else ""
        if algorithm in _FONT_OBFUSCATION:
            continue
        for reference in descendants(encrypted, "CipherReference"):
            path, _ = resolve("", reference.get("URI", ""))
            if path in content or path.lower().endswith(_CONTENT_EXTENSIONS):
                raise ScriptError(f"the EPUB is DRM-protected ({ENCRYPTION} encrypts {path!r})")


def read_package(archive: Archive, path: str) -> Package:
    """Metadata, spine, navigation files and guide of the OPF at ``path``."""
    root = parse_xml(archive.read(path), path, "OPF")
    if local_name(root) != "package":
        raise ScriptError(f"malformed OPF {path!r}: the root element is not <package>")
    metadata = children(root, "metadata")
    manifest = _manifest(root, path)
    spines = children(root, "spine")
    if not spines:
        raise ScriptError(f"malformed OPF {path!r}: it has no <spine>")
    spine = spines[0]
    nav = next((item.path for item in manifest.values() if "nav" in item.properties), None)
    toc_id = spine.get("toc")
    ncx_item = manifest.get(toc_id) if toc_id else None
    if ncx_item is None:
        ncx_item = next((i for i in manifest.values() if i.media_type == _NCX_MEDIA_TYPE), None)
    return Package(
        path=path,
        info=_info(metadata[0]) if metadata else BookInfo(),
        spine=_spine(spine, manifest),
        nav=nav,
        ncx=ncx_item.path if ncx_item is not None else None,
        guide=_guide(root, path),
    )


def _manifest(root: etree._Element, path: str) -> dict[str, ManifestItem]:
    items: dict[str, ManifestItem] = {}
    for manifest in children(root, "manifest"):
        for item in children(manifest, "item"):
            item_id, href = item.get("id"), item.get("href")
            if not item_id or not href:
                raise ScriptError(f"malformed OPF {path!r}: a manifest item without an id or href")
            items.setdefault(
                item_id,
                ManifestItem(
                    resolve(path, href)[0],
                    (item.get("media-type") or "").strip().lower(),
                    frozenset((item.get("properties") or "").split()),
                ),
            )
    return items


def _spine(spine: etree._Element, manifest: dict[str, ManifestItem]) -> list[SpineItem]:
    """The spine's documents in reading order, each once."""
    items: list[SpineItem] = []
    seen: set[str] = set()
    for itemref in children(spine, "itemref"):
        item = manifest.get(itemref.get("idref") or "")
        if item is None:
            raise ScriptError(
                f"malformed OPF: the spine refers to {itemref.get('idref')!r}, not in the manifest"
            )
        if item.path not in seen:
            seen.add(item.path)
            items.append(SpineItem(item.path, item.media_type, itemref.get("linear", "yes").strip() != "no"))
    return items


def _info(metadata: etree._Element) -> BookInfo:
    """Title, author(s) and language from the OPF metadata (Dublin Core, any namespace)."""
    titles = [text_of(t) for t in children(metadata, "title")]
    languages = [text_of(t) for t in children(metadata, "language")]
    return BookInfo(
        title=_bounded(next((t for t in titles if t), None)),
        author=_bounded(", ".join(_authors(metadata)) or None),
        language=_bounded(next((t for t in languages if t), None)),
    )


def _authors(metadata: etree._Element) -> list[str]:
    """The book's creators who are authors (role "aut" in EPUB 2 attributes or EPUB 3 refinements, or no
    role at all); every creator if none is."""
    roles: dict[str, str] = {}  # creator id -> role, from EPUB 3 <meta refines="#id" property="role">
    for meta in children(metadata, "meta"):
        if meta.get("property") == "role" and (meta.get("refines") or "").startswith("#"):
            roles[(meta.get("refines") or "")[1:]] = text_of(meta)
    creators: list[tuple[str, str]] = []
    for creator in children(metadata, "creator")[:_MAX_CREATORS]:
        role = next((str(value) for name, value in creator.attrib.items() if str(name).endswith("role")), "")
        role = roles.get(creator.get("id") or "", role)
        if name := text_of(creator):
            creators.append((name, role.strip().lower()))
    authors = [name for name, role in creators if role in ("", "aut")]
    return authors or [name for name, _ in creators]


def _bounded(value: str | None) -> str | None:
    return value[:_MAX_META] if value else None


def _guide(root: etree._Element, path: str) -> list[Landmark]:
    landmarks: list[Landmark] = []
    for guide in children(root, "guide"):
        for reference in children(guide, "reference"):
            href, kind = reference.get("href"), reference.get("type")
            if href and kind:
                target, fragment = resolve(path, href)
                landmarks.append(Landmark(target, fragment, guide_type(kind)))
    return landmarks


def read_nav(archive: Archive, path: str) -> tuple[list[TocEntry], list[Landmark]]:
    """The entries of the navigation document's ``toc`` nav (flattened, in order) and its landmarks."""
    root = parse_xml(archive.read(path), path, "navigation document")
    entries: list[TocEntry] = []
    landmarks: list[Landmark] = []
    for nav in descendants(root, "nav"):
        types = epub_types(nav)
        if "toc" in types and not entries:
            entries = [entry for li in descendants(nav, "li") if (entry := _nav_entry(li, path))]
        elif "landmarks" in types:
            landmarks.extend(_nav_landmarks(nav, path))
    return entries, landmarks


def _nav_entry(li: etree._Element, path: str) -> TocEntry | None:
    """A nav ``li``'s own link (or unlinked heading ``span``), not its nested list's."""
    label = next((child for child in li if local_name(child) in ("a", "span")), None)
    if label is None:
        return None
    title = text_of(label) or (label.get("title") or "").strip()
    href = label.get("href") if local_name(label) == "a" else None
    if href:
        target, fragment = resolve(path, href)
        return TocEntry(title, target, fragment)
    return TocEntry(title, "", "")


def _nav_landmarks(nav: etree._Element, path: str) -> list[Landmark]:
    found: list[Landmark] = []
    for link in descendants(nav, "a"):
        href, kind = link.get("href"), (link.get(EPUB_TYPE) or "").split()
        if href and kind:
            target, fragment = resolve(path, href)
            found.append(Landmark(target, fragment, guide_type(kind[0].rpartition(":")[2])))
    return found


def read_ncx(archive: Archive, path: str) -> list[TocEntry]:
    """The NCX's navigation points, flattened in document order (nested points after their parent)."""
    root = parse_xml(archive.read(path), path, "NCX")
    entries: list[TocEntry] = []
    for map_ in children(root, "navMap"):
        for point in descendants(map_, "navPoint"):
            labels = children(point, "navLabel")
            contents = children(point, "content")
            title = text_of(labels[0]) if labels else ""
            src = contents[0].get("src") if contents else None
            target, fragment = resolve(path, src) if src else ("", "")
            entries.append(TocEntry(title, target, fragment))
    return entries

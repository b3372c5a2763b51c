"""`ascend-build catalogue` against a real registry, read back by a real browser.

The registry is Debian's docker-registry on loopback (htpasswd auth; the `registry` fixture); no
Docker Engine: each image is a config and gzip tar layers put through the registry API
(`tests.support.mirror.push_image`), with the labels `image` gives a sealed twin. Its statements are
made and signed by the tool's own code (`attest.statements_for`, `attest.attest`) with a real P-256
key. In the repository:

- the CPU twin of the shipped Debian 12 x86_64 cell, validated (every tier passed, with its time),
  and the same cell's aarch64 twin, sharing its first layer, both under an index ``<family>-cpu``;
- images that are not validated: one pushed with no statement under the cell's NPU tag, one whose
  statement was edited after signing (its subject moved to it, its host made an NPU host), one
  signed by another key, and one whose labels and statement type are HTML;
- the x86_64 twin also under another cell's tag (that tag is refused, the image stays validated),
  and a lazily pullable variant of it bound by a signed lazy-variant statement (named beside it).

The page is opened in headless Chromium (`tests.support.browser`): its text shows the validated
twin with its tiers and times, the matrix's cells without an image as missing, the others apart;
the HTML a registry served is text there, never an element; a screenshot is drawn.
"""

from __future__ import annotations

import base64
import html.parser
import json
import os
import shlex
import subprocess
import uuid
from pathlib import Path
from typing import Dict, List

import pytest

from builder.catalogue import collect, pages
from builder.errors import UserError
from builder.images import attest
from builder.registry import OCI_MANIFEST, Registry
from builder.trust import attached, signing, statements, variant
from builder.vocabulary import CPU, REQUIRE_DRIVER_ENV, Label, tier_names
from tests.support import browser
from tests.support import trust as ht
from tests.support.mirror import layer, push_image, push_index
from tests.support.trust import CELL_ID, CLI, ROOT  # the fixtures (registry, creds, keys) come from conftest and its plugin

NAMESPACE = f"ascend-build-test-catalogue-{uuid.uuid4().hex[:8]}"
REPO = f"{NAMESPACE}/ascend-build/pytorch"  # where `image --push 127.0.0.1:PORT/NAMESPACE` puts the shipped matrix's images
FAMILY = CELL_ID[: -len("-x86_64")]
ARM_CELL = FAMILY + "-aarch64"
MISSING_CELL = "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64"  # in the shipped matrix, never pushed
LYING_TAG = f"{MISSING_CELL}-{CPU}"  # the missing cell's twin tag, put on the Debian twin
HOSTILE = '<script>document.title="owned"</script><img src=x onerror="alert(1)">'
SECONDS = {name: 1.25 + n for n, name in enumerate(tier_names())}


def report() -> dict:
    """The smoke report of a twin that passed every tier, each with the seconds it took."""
    made = ht.report()
    for tier in made["tiers"]:
        tier["seconds"] = SECONDS[tier["name"]]
    return made


@pytest.fixture(scope="module")
def published(registry, creds, keys) -> Dict[str, str]:
    """The repository described above; name -> digest."""
    reg = Registry(registry.host)
    team = signing.load_private(keys["team"][0])
    base = [layer(b"the OS and the Python environment, the same bytes in both twins" * 64, "base.txt")]
    made: Dict[str, str] = {}
    for arch, cell in (("x86_64", CELL_ID), ("aarch64", ARM_CELL)):
        labels = ht.sealed_twin_labels(arch)
        made[arch] = push_image(reg, REPO, f"{cell}-{CPU}", labels, f"twin {arch}".encode(), arch, base,
                                env=[f"{REQUIRE_DRIVER_ENV}=25.0.RC1", "PATH=/usr/bin"])
        predicates = attest.statements_for(report(), tier_names(), cell, CPU, ht.CONTENT_HASH, None)
        attest.attest(f"{registry.host}/{REPO}:{cell}-{CPU}", made[arch], predicates, team)
    push_index(reg, REPO, f"{FAMILY}-{CPU}", {"x86_64": made["x86_64"], "aarch64": made["aarch64"]})
    # the x86_64 twin also under another cell's tag: that tag lies, the image stays validated
    assert reg.put_manifest(REPO, LYING_TAG, reg.manifest(REPO, made["x86_64"]).body, OCI_MANIFEST) == made["x86_64"]
    # a lazily pullable variant of it (same labels), trusted only through a lazy-variant statement binding it
    made["lazy"] = push_image(reg, REPO, f"{CELL_ID}-{CPU}-estargz", ht.sealed_twin_labels(), b"lazy", "x86_64", base,
                              env=[f"{REQUIRE_DRIVER_ENV}=25.0.RC1", "PATH=/usr/bin"])
    binding = {"validatedImage": {"digest": made["x86_64"]}, "layers": [
        {"variant": {"digest": x["digest"], "tocDigest": ""}} for x in reg.manifest(REPO, made["lazy"]).data["layers"]]}
    attest.attest(f"{registry.host}/{REPO}:{CELL_ID}-{CPU}-estargz", made["lazy"], [(variant.LAZY_VARIANT_V1, binding)],
                  team)

    npu_labels = {**ht.sealed_twin_labels(), Label.VARIANT: "npu", Label.CANN: "9.1.0", Label.CHIP: "910b"}
    made["unsigned"] = push_image(reg, REPO, CELL_ID, npu_labels, b"unsigned")
    made["edited"] = push_image(reg, REPO, "edited", ht.sealed_twin_labels(), b"edited")
    real = reg.manifest(REPO, attached.attestation_tag(made["x86_64"]))
    layer_of = next(x for x in real.data["layers"] if x["annotations"]["predicateType"] == statements.VALIDATION_V1)
    envelope = json.loads(reg.blob(REPO, layer_of["digest"]))
    body = json.loads(base64.b64decode(envelope["payload"]))
    body["subject"][0]["digest"]["sha256"] = made["edited"].split(":")[1]
    body["predicate"]["ranOn"]["kind"] = "npu-host"
    envelope["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
    attached.attach(reg, REPO, reg.manifest(REPO, made["edited"]), [(json.dumps(envelope).encode(), statements.VALIDATION_V1)],
                    team.public_key())
    made["stranger"] = push_image(reg, REPO, "stranger", ht.sealed_twin_labels(), b"stranger")
    ht.attest_as(registry, REPO, "stranger", made["stranger"], keys["stranger"][0])
    made["hostile"] = push_image(reg, REPO, "hostile", {**ht.sealed_twin_labels(), Label.CELL: HOSTILE}, b"hostile")
    stranger = signing.load_private(keys["stranger"][0])
    forged = statements.sign(statements.statement(f"{registry.host}/{REPO}", made["hostile"], HOSTILE, {}), stranger)
    attached.attach(reg, REPO, reg.manifest(REPO, made["hostile"]), [(forged, HOSTILE)], stranger.public_key())
    return made


def catalogue_cli(registry, creds, keys, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """`catalogue` run as a team runs it, from the folder of its public key (the commands it prints name it so)."""
    done = subprocess.run([CLI, "catalogue", "--registry", f"{registry.host}/{NAMESPACE}", "--trust-key", "team.pub",
                           "--matrix", str(ROOT / "matrix"), "--out", str(out), *extra],
                          cwd=keys["team"][1].parent, capture_output=True, text=True, timeout=300, env={**os.environ, **creds})
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def site(published, registry, creds, keys, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("catalogue") / "site"
    done = catalogue_cli(registry, creds, keys, out)
    print(f"\n$ ascend-build catalogue --registry {registry.host}/{NAMESPACE} --trust-key team.pub --out site\n{done.stdout}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 validated image(s)" in done.stdout
    return out


def test_only_statements_that_verify_make_an_image_validated(site, published, keys):
    data = json.loads((site / "catalogue.json").read_text())
    assert [v["digest"] for v in data["validated"]] == [published["aarch64"], published["x86_64"]]  # arch order
    twin = next(v for v in data["validated"] if v["arch"] == "x86_64")
    assert (twin["cell"], twin["variant"], twin["cann"], twin["chip"], twin["torch"], twin["torch_npu"], twin["python"],
            twin["os"]) == (CELL_ID, CPU, "9.1.0", "910b", "2.13.0", "2.13.0", "3.11", "debian12")
    assert twin["min_driver"] == "25.0.RC1" and twin["ran_on"] == "cpu-twin"
    assert [(t["name"], t["status"], t["seconds"]) for t in twin["tiers"]] == [(t, "passed", SECONDS[t]) for t in tier_names()]
    assert twin["tags"] == [f"{CELL_ID}-{CPU}", f"{FAMILY}-{CPU} (index)"]
    assert data["key_fingerprint"] == signing.fingerprint(signing.load_public(keys["team"][1]))
    assert data["key_name"] == "team.pub"

    assert twin["lazy_variants"] == [f"{CELL_ID}-{CPU}-estargz"]  # bound to it by its signed statement

    refused = {r["digest"]: r["why"] for r in data["refused"] if r["tags"] != [LYING_TAG]}
    assert set(refused) == {published[k] for k in ("unsigned", "edited", "stranger", "hostile")}
    [lie] = [r for r in data["refused"] if r["tags"] == [LYING_TAG]]
    assert lie["digest"] == published["x86_64"] and "another cell's image under this cell's tag" in lie["why"]
    assert "no statement is attached" in refused[published["unsigned"]]
    assert "not signed by the trusted key" in refused[published["edited"]]
    assert "not signed by the trusted key" in refused[published["stranger"]]
    assert HOSTILE in refused[published["hostile"]]  # the claimed type, as verify says it


def test_sizes_and_the_bytes_images_share_are_the_registrys(site, published, registry):
    data = json.loads((site / "catalogue.json").read_text())
    reg = Registry(registry.host)
    for entry in data["validated"]:
        layers = reg.manifest(REPO, entry["digest"]).data["layers"]
        assert entry["compressed_bytes"] == sum(x["size"] for x in layers)
        assert entry["shared_bytes"] == layers[0]["size"]  # the base layer, in both twins
    assert data["unique_bytes"] == data["total_bytes"] - data["validated"][0]["shared_bytes"]


def test_the_matrix_cells_without_a_validated_image_are_missing(site):
    missing = {m["cell"]: (m["missing"], m["validated"]) for m in json.loads((site / "catalogue.json").read_text())["missing"]}
    assert missing[CELL_ID] == (["npu"], ["cpu"])          # its twin validated, its NPU image not (unsigned)
    assert missing[MISSING_CELL] == (["npu", "cpu"], [])
    assert ARM_CELL not in missing                         # not in the shipped matrix


def test_the_same_registry_and_key_give_the_same_bytes(site, registry, creds, keys, tmp_path):
    again = tmp_path / "again"
    assert catalogue_cli(registry, creds, keys, again).returncode == 0
    names = sorted(p.name for p in site.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    assert {"index.html", "catalogue.json", "cann-9.1.0.html", "cann-8.0.RC3.html", "chip-910b.html",
            "arch-aarch64.html", "arch-x86_64.html"} <= set(names)
    assert [(site / n).read_bytes() for n in names] == [(again / n).read_bytes() for n in names]
    # written over an earlier catalogue: replaced whole, with the time given
    assert catalogue_cli(registry, creds, keys, again, "--generated", "run 7").returncode == 0
    assert "Generated: run 7" in (again / "index.html").read_text()


def test_the_commands_on_the_page_run_as_printed(site, published, registry, creds, keys):
    """`verify` of the twin's line exits 0; its `k8s job` line (for this x86_64 host, the twin asks for no NPU) pins
    the very digest the catalogue lists. `pull` and `run` need Docker Engine; their lines hold the same words."""
    twin = next(v for v in json.loads((site / "catalogue.json").read_text())["validated"] if v["arch"] == "x86_64")
    lines = {c["name"]: c["line"] for c in twin["commands"]}
    env = {**os.environ, **creds}
    for name in ("verify", "k8s job"):
        words = shlex.split(lines[name])
        assert words[0] == "ascend-build"
        done = subprocess.run([CLI, *words[1:]], cwd=keys["team"][1].parent, capture_output=True, text=True,
                              timeout=120, env=env)
        assert done.returncode == 0, f"{lines[name]}\n{done.stdout}{done.stderr}"
        if name == "k8s job":
            assert f"image: {registry.host}/{REPO}@{published['x86_64']}" in done.stdout
    assert lines["run"].split(" -- ")[0].endswith(f"{registry.host}/{REPO}@{published['x86_64']}")
    assert "--variant cpu --trust-key team.pub" in lines["pull"]


class _Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: List[str] = []
        self.attributes: List[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += [name for name, _ in attrs]


def _text(dom: str) -> str:
    class Text(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.parts: List[str] = []
            self.skip = False

        def handle_starttag(self, tag, attrs):
            self.skip = tag in ("style", "title")

        def handle_endtag(self, tag):
            self.skip = False

        def handle_data(self, data):
            if not self.skip:
                self.parts.append(data)
    reader = Text()
    reader.feed(dom)
    return " ".join(" ".join(reader.parts).split())


def test_headless_chromium_shows_the_validated_twin_its_tiers_and_the_missing_cells(site, published, tmp_path):
    dom = browser.dump_dom((site / "index.html").as_uri(), tmp_path / "profile")
    _, _, rest = dom.partition('<h2 id="validated">')
    validated, _, rest = rest.partition('<h2 id="missing">')
    missing, _, refused = rest.partition('<h2 id="not-validated">')
    validated, missing, refused = _text(validated), _text(missing), _text(refused)
    assert f"{CELL_ID} CPU twin" in validated
    assert "Ran on the CPU twin on a build machine" in validated
    for tier in tier_names():
        assert f"{tier} passed {SECONDS[tier]:.1f} s" in validated
    assert published["x86_64"] in validated and published["unsigned"] not in validated
    assert f"{MISSING_CELL} 8.0.RC3 910b aarch64 NPU image, CPU twin none" in missing
    assert f"{CELL_ID} 9.1.0 910b x86_64 NPU image CPU twin" in missing
    for name in ("unsigned", "edited", "stranger", "hostile"):
        assert published[name] in refused
    assert HOSTILE in refused                                 # shown as text ...
    elements = _Elements()
    elements.feed(dom)
    assert "script" not in elements.tags and "img" not in elements.tags and "onerror" not in elements.attributes
    assert "<title>Validated images</title>" in dom           # ... and the page's script never ran

    page = _text(browser.dump_dom((site / "cann-8.0.RC3.html").as_uri(), tmp_path / "profile"))
    assert "No validated image here." in page and MISSING_CELL in page and CELL_ID not in page
    page = _text(browser.dump_dom((site / "arch-x86_64.html").as_uri(), tmp_path / "profile"))
    assert f"{CELL_ID} CPU twin" in page and ARM_CELL not in page


def test_the_screenshot_is_drawn(site, tmp_path):
    png = browser.screenshot((site / "index.html").as_uri(), tmp_path / "index.png", tmp_path / "profile")
    width, height, colours = browser.png_colours(png, rows=600)
    print(f"\nscreenshot {png}: {png.stat().st_size} bytes, {width}x{height}, {len(colours)} colours in its first 600 rows")
    assert (width, height) == (1280, 2000)
    assert png.stat().st_size > 20_000 and len(colours) > 20


# --- no registry: the page of a hand-made catalogue ---------------------------------------------


def _catalogue(**over) -> collect.Catalogue:
    tier = collect.Tier("versions", "passed", 2.0, HOSTILE)
    image = collect.Validated(
        anchor="img-1", repository=HOSTILE, reference=f"r/{HOSTILE}@sha256:" + "a" * 64, digest="sha256:" + "a" * 64,
        tags=(HOSTILE,), cell=HOSTILE, variant=CPU, arch="x86_64", chip="../../etc", product="", cann=HOSTILE,
        torch=HOSTILE, torch_npu="", python="3.11", os=HOSTILE, min_driver=HOSTILE, min_firmware="", stand_in="",
        ran_on=HOSTILE, ran_on_detail=HOSTILE, smoke_started=HOSTILE, tiers=(tier,), compressed_bytes=10, shared_bytes=0,
        layers=(("sha256:" + "b" * 64, 10),), lazy_variants=(), commands=(collect.Command("verify", HOSTILE, HOSTILE),))
    made = dict(registry=HOSTILE, repositories=(HOSTILE,), key_name=HOSTILE, key_fingerprint="f" * 64, require="any",
                generated=HOSTILE, validated=(image,), refused=(collect.Refused(HOSTILE, (HOSTILE,), HOSTILE, HOSTILE, HOSTILE),),
                missing=(collect.Missing(HOSTILE, HOSTILE, "910b", "aarch64", ("npu",), ("cpu",)),),
                cells_in_matrix=1, unique_bytes=10, total_bytes=10)
    made.update(over)
    return collect.Catalogue(**made)  # type: ignore[arg-type]


def test_text_from_a_registry_never_becomes_markup_or_a_path():
    files = pages.render(_catalogue())
    for name, body in files.items():
        assert "/" not in name and not name.startswith(".") and name.endswith((".html", ".json")), name
        if name.endswith(".html"):
            elements = _Elements()
            elements.feed(body.decode())
            assert "script" not in elements.tags and "img" not in elements.tags, name
            assert "&lt;script&gt;" in body.decode(), name
    assert "chip--" in " ".join(files)  # "../../etc" named by its hash
    assert json.loads(files["catalogue.json"])["validated"][0]["cell"] == HOSTILE


def test_the_site_replaces_only_an_earlier_catalogue(tmp_path):
    files = pages.render(_catalogue(generated=""))
    pages.write(tmp_path / "site", files)
    pages.write(tmp_path / "site", files)  # over itself
    assert sorted(p.name for p in (tmp_path / "site").iterdir()) == sorted(files)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    with pytest.raises(UserError, match="no catalogue"):
        pages.write(other, files)
    assert [p.name for p in other.iterdir()] == ["mine.txt"]
    (tmp_path / "link").symlink_to(tmp_path / "site")
    with pytest.raises(UserError, match="no catalogue"):
        pages.write(tmp_path / "link", files)
    assert (tmp_path / "link").is_symlink()


def test_without_a_key_it_lists_nothing_and_says_why(tmp_path):
    from builder.cli.trust_key import NODE_CONFIG, NODE_KEY_FILE

    if NODE_KEY_FILE.exists() or NODE_CONFIG.exists():
        pytest.skip(f"this machine names a node key ({NODE_KEY_FILE} or {NODE_CONFIG})")
    env = {k: v for k, v in os.environ.items() if k != "ASCEND_BUILD_TRUST_KEY"}
    done = subprocess.run([CLI, "catalogue", "--registry", "127.0.0.1:1", "--out", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert "the catalogue lists only images whose signed statements verify, and no key was given" in done.stderr
    assert "fix: give --trust-key FILE" in done.stderr and not (tmp_path / "site").exists()

"""docs/configuration.md is the settings' own reference, generated from their descriptions: a
setting added, removed or described anew without the page regenerated fails here."""

from indexer.base import settings
from indexer.testing.cluster import REPO


def test_the_configuration_page_is_generated_from_the_settings_as_they_are():
    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == settings.reference(), "regenerate it: python -m indexer.base.settings > docs/configuration.md"


def test_every_setting_is_on_the_page_with_a_description():
    page = settings.reference()
    for name, field in settings.Settings.model_fields.items():
        assert f"| `INDEXER_{name.upper()}` |" in page
        assert field.description, f"INDEXER_{name.upper()} has no description"

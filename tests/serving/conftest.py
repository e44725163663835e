"""The fixtures the serving tests share."""

from tests.support.shop import shop_server  # noqa: F401 (a fixture: the shop, served)

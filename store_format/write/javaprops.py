"""A record's properties as the Java map a 5.x broker holds them in (the put path's hooks and the broker flows rebuild
a stored string from it)."""
from __future__ import annotations

from ..javahash import JavaHashMap
from ..properties import format_properties, parse_properties


def property_map(raw: str, capacity: int | None = None) -> JavaHashMap:
    """A stored property string back as the Java map it was serialized from: its keys put in string order (a
    HashMap rebuilt that way iterates as the original did), ``capacity`` as the map was created
    (``string2messageProperties`` makes ``new HashMap<>(128)``; a client's ``Message`` the default 16)."""
    m = JavaHashMap(initial_capacity=capacity)
    for k, v in parse_properties(raw).items():
        m.put(k, v)
    return m


def to_string(props: JavaHashMap, trailing: bool = True) -> str:
    """``messageProperties2String`` (5.2.0+ ends with 0x02)."""
    return format_properties(props.to_dict(), trailing_separator=trailing)


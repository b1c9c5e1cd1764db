"""Hand-written MRC 1.0 test vectors and an independent minimal decoder.

Both modules are written straight from the byte tables of PROTOCOL-NOTES section 8 (the
public readings of the OCP MRC 1.0 packet tables), with ``struct`` and literal offsets, and
import nothing from mrcnet: they are a second reading to hold mrcnet's codecs, its scapy
layers and the Wireshark dissector against.

- :mod:`vectors.mrc10`: one frame of every kind, each with the dict of field values it
  must decode to, and :func:`vectors.mrc10.write_pcap` to put them in a capture file.
- :mod:`vectors.minidecode`: frame bytes -> the same dicts.

The tests import them as ``vectors.mrc10`` / ``vectors.minidecode`` (pytest puts
tests/wire on ``sys.path``).
"""

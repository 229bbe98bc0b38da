"""The zstd dictionaries stored event payloads are compressed with, by id. NEVER EDIT ONE.

A payload written with dictionary N can only be read back with exactly these bytes, so a
dictionary, once released, is frozen: ``tests/store/test_codec.py`` pins each one's SHA-256.
Better text means a new id (and new writes use it), never a change to an old one.

Dictionary 1 is zstd "raw content" (no training): generic English and programming words
written for this project, then the msgpack skeletons of the commonest events (their field
names), which zstd matches best because they sit at the end, nearest the data. It holds no
user text: a dictionary trained on a store's own messages would keep fragments of deleted
sessions, which a verified delete must not leave behind.

Dictionary 2 is a full zstd dictionary: content and the entropy tables (Huffman for
literals, FSE for sequences) of what it was trained on, so compressing a payload reuses
them instead of building its own (about half of the time zstd took for a chat message with
dictionary 1). It was trained by ``tests/fixtures/make_zdict.py`` on synthetic events built
from dictionary 1's word list and hermes' message shapes, never on a store's text. It
compresses smaller too (bench/README.md, "Gateway writer: where the time goes").
"""

from __future__ import annotations

import base64

_WORDS_1 = (
    "the of and to a in is it you that for on with this be are as was not have but we can at "
    "by from or if will an so do all your my what there they which would one about more when "
    "up out just then also use should could like need into than only how now here still again "
    "please thanks thank sure okay yes no maybe great good let me know see look try think want "
    "I'm it's don't can't doesn't isn't that's there's you're we're I'll I've let's what's "
    "because after before during while where each every some other same different another "
    "first last next new old right wrong best better more most less least many much few "
    "file files function functions error errors message messages session sessions agent model "
    "test tests run running code value values return returns call calls tool tools result "
    "results output input config configuration change changes line lines data type types name "
    "names path paths list lists user users time check build fix fixed update add added remove "
    "create created write read server client request response default option options version "
    "issue problem example command commands search index token tokens prompt context window "
    "summary branch resume export import delete title workspace retry deploy refactor parse "
    "handle module class method string number integer boolean object array dict key keys "
    "import from def class self return None True False async await yield raise except try "
    "const let var function => null undefined true false export default interface "
    "SELECT FROM WHERE INSERT INTO UPDATE DELETE CREATE TABLE INDEX ORDER BY GROUP LIMIT "
    "http https www .com .org .io .py .js .ts .md .json .yaml .toml .txt src/ tests/ docs/ "
    "README.md main.py index.js package.json pyproject.toml Dockerfile Makefile "
    "git commit push pull merge rebase diff status log checkout stash "
    "npm pip install python node docker kubectl curl ssh sudo apt "
    "Traceback (most recent call last): File line in Error: Exception ValueError TypeError "
    "KeyError AttributeError ImportError RuntimeError warning failed passed success "
    "The the This this That I You We It Here There What How Why When Can Could Would Should "
    "Let me I'll I can Sure, Here is the Here's a The file The function The error "
    "I've updated the I have added the You can Thanks! Great, Okay, "
)

_STRUCTURE_1 = (
    b"\xde\x00\x06\xa2at\xcb?\xf0\x00\x00\x00\x00\x00\x00\xa5actor\xa3cli\xaasession_id"
    b"\xa0\xa6source\xa3cli\xa3cwd\xa6/home/\xadworkspace_key\xa6/home/\x84\xa2at\xcb?"
    b"\xf0\x00\x00\x00\x00\x00\x00\xa5actor\xa3cli\xa9tokens_in\x01\xaatokens_out\x01\x83"
    b"\xa2at\xcb?\xf0\x00\x00\x00\x00\x00\x00\xa5actor\xa8gateway:\xa8messages\x93\x84"
    b"\xa3seq\x0c\xa3uid\xa0\xa4role\xa4user\xa2at\xcb?\xf0\x00\x00\x00\x00\x00\x00\x88"
    b"\xa3seq\r\xa3uid\xa0\xa4role\xa9assistant\xaatool_calls\x91\x83\xa2id\xa5call_\xa4n"
    b'ame\xa0\xa9arguments\xac{"path": ""}\xa9tokens_in\x01\xaatokens_out\x01\xadfinish_r'
    b"eason\xa4stop\xa2at\xcb?\xf0\x00\x00\x00\x00\x00\x00\x86\xa3seq\x0e\xa3uid\xa0\xa4r"
    b"ole\xa4tool\xactool_call_id\xa5call_\xa9tool_name\xa0\xa2at\xcb?\xf0\x00\x00\x00"
    b"\x00\x00\x00\x83\xa2at\xcb?\xf0\x00\x00\x00\x00\x00\x00\xa5actor\xa3cli\xa7message"
    b"\x86\xa3seq\x0e\xa3uid\xa0\xa4role\xa4tool\xactool_call_id\xa5call_\xa9tool_name"
    b"\xa0\xa2at\xcb?\xf0\x00\x00\x00\x00\x00\x00\x83\xa2at\xcb?\xf0\x00\x00\x00\x00\x00"
    b"\x00\xa5actor\xa3cli\xa7message\x88\xa3seq\r\xa3uid\xa0\xa4role\xa9assistant\xaatoo"
    b'l_calls\x91\x83\xa2id\xa5call_\xa4name\xa0\xa9arguments\xac{"path": ""}\xa9tokens_i'
    b"n\x01\xaatokens_out\x01\xadfinish_reason\xa4stop\xa2at\xcb?\xf0\x00\x00\x00\x00\x00"
    b"\x00\x83\xa2at\xcb?\xf0\x00\x00\x00\x00\x00\x00\xa5actor\xa3cli\xa7message\x84\xa3s"
    b"eq\x0c\xa3uid\xa0\xa4role\xa4user\xa2at\xcb?\xf0\x00\x00\x00\x00\x00\x00"
)

_TRAINED_2 = base64.b64decode(
    "N6Qw7AIAAABCELCzTQcwDIOpgQbC8cisqUpZh9lJEAQXsdhkbyJlSrullLKblHsnubNgq6Q99IqHgRuvQrNuIiKz"
    "ja23EACIDLIqIwEACAYFBWOS+bUdAAQgyxLWTpBn8izHQQg4RwAwAAAAAGAAAAAAAAAAAAAA9JJG1aEoVMgQogCA"
    "BAAAAAAAAAABAAAABAAAAAgAAACkbmFtZalyZWFkX2ZpbGWpYXJndW1lbnRzt3sicGF0aCI6ICJzcmMvdGhpcy5w"
    "eSJ9qXRva2Vuc19pbs0aB6p0b2tlbnNfb3V0zQFtrWZpbmlzaF9yZWFzb26qdG9vbF9jYWxsc6JhdMtB2ku8yRVg"
    "A4ejc2VxzQEvo3VpZLBmdWoyZHlmeGtxZDV0b3JppHJvbGWkdG9vbKdjb250ZW502gQPcGFja2FnZS5qc29uIHJl"
    "Y2VudCB3aW5kb3cgYXQgY29udGV4dCBmdW5jdGlvbnMgSSAubWQgdmVyc2lvbiBlYWNoIHN1cmUgR3JlYXQsIHNl"
    "bGYgbGluZSBpbXBvcnQgdG9vbHMgcHVsbCByZXR1cm5zIGlmIGlucHV0IGNhbGwgbXkgZXZlcnkgd3JpdGUgR1JP"
    "VVAgdGhhbiB0aXRsZSBkaWZmIGNhbGwgZm9yb2xfbmFtZaxzZWFyY2hfZmlsZXOiYXTLQdpL5KR/WvGDomF0y0Ha"
    "S+Sk9ytVpWFjdG9yo2NsaadtZXNzYWdlhaNzZXHMxaN1aWSwd2FsY3hreHR5ZzVhY2s1ZqRyb2xlpHVzZXKnY29u"
    "dGVudNoCEWNvZGUgVGhlcmUgaW5wdXQgY29udGV4dCBJTkRFWCBJJ2xsIHNlbGYgcmlnaHQgaGVyZSBIZXJlIHdo"
    "aWNoIHBpcCBkb2Vzbid0IGFkZCBoZXJlIHNlc3Npb24gVEFCTEUgbm93IGR1cmluZyBjYWxsIHJldHVybiBzZWxm"
    "IHdyaXRlIGxhc3QpOiBzYW1lIFZhbHVlRXJyb3IgY2xhc3MgaXMgcmVjZW50IGRvZXNuJ3QgUkVBRE1FLm1kIGNs"
    "aWVudCBzaG91bGQgdHlwZSBiZXN0IHJlZmFjdG9yIGFuIGFsbCBmdW5jdGlvbnMgYW5vdGhlciB3cm9uZyBvciBj"
    "b250ZXh0IGludGVnZXIgY2hhbmdlcyBUaGF0IHJ1bm5pbmcgcGFzc2VkIHJlcXVlc3QgcHJvbXB0IHRvb2xzIGJl"
    "Zm9yZSB0b29sIGdpdCBwbGVhc2UgZG9lc24ndCBib29sZWFuIGVycm9yIHRpdGxlIHJ1biBOb25lIGRlZiByZXR1"
    "cm4gbmV3IHRoYW4gaXMgbW9yZSBkb24ndCB0aGluayBkZWZhbnTaARBmYWxzZSBzZXNzaW9uIFlvdSBHcmVhdCwg"
    "YXQgQ1JFQVRFIHNyYy8gZGVmYXVsdCBNYWtlZmlsZSBhZGRlZCBpdCdzIGJ5IG1haW4ucHkgYW5vdGhlciB3YXMg"
    "V2h5IGJlIG1hbnkgYWZ0ZXIgQlkgd2hlbiB0aGUgdXBkYXRlIGEgZGVmYXVsdCBpc24ndCBwYXNzZWQgcmVjZW50"
    "IFlvdSBlcnJvciBFeGNlcHRpb24gbGFzdCBzbyBlYWNoIGxpa2UgdGhleSBXaHkgRG9ja2VyZmlsZSBFcnJvcjog"
    "bm8gaW1wb3J0IGxpbmVzIGFkZGVkIGNhbGwgdGhhdCBkaWZmIHJ1bm5pbmcgbGluZax0b29sX2NhbGxfaWSxY2Fs"
    "bF8xZDMzODliZDRlZjapdG9vbF9uYW1lpXBhdGNoomF0y0HaS91ubl/ng6JhdMtB2kvdboZnfKVhY3RvcqlnYXRl"
    "d2F5OjGnbWVzc2FnZYmjc2VxfaN1aWSwbnJraWlsaWh0eW55dDdwd6Ryb2xlqWFzc2lzdGFudKdjb250ZW50t2xl"
    "YXN0IHN0YXR1cyBjaGVjayBUcnVlqnRvb2xfY2FsbHORg6JpZLFjYWxsXzJjZWUwODY4NGVjOKRuYW1lrHNlYXJj"
    "aF9maWxlc6lhcmd1bWVudHO5eyJwYXRoIjogInNyYy9pbXBvcnQucHkifal0aGFuZ2VzIG1vZHVsZSBsaXN0cyB0"
    "b2tlbnMgVVBEQVRFIHdhbnQgdmFsdWVzIGVycm9ycyB0aGUgZmlsZSBidXQgbWVzc2FnZXMgSSd2ZSBjaGFuZ2Ug"
    "Y2hhbmdlcyB5b3UncmUgc2VlIEtleUVycm9yIGluZGV4IEV4Y2VwdGlvbiByZXN1bHRzIG5vdyBodHRwIHdvdWxk"
    "IGhvdyBodHRwcyByZXF1ZXN0IHdvdWxkIGNhbid0IGh0dHBzIG1haW4ucHkgZml4IHdoYXQncyBmdW5jdGlvbnMg"
    "bXVjaCBjYWxsIGp1c3QgcHl0aG9uIGJldHRlciBJJ3ZlIERFTEVURSBJJ20gcmVzdWx0cyBub2RlIGludG8gdGVz"
    "dHMgYnVpbGQgbmFtZSByZXR1cm5zIGxhc3QgSXQgZGVwbG95IG5hbWUgd3JpdGUgcGFyc2UgYXJlIC5qc29uIGlu"
    "c3RhbGwgbGluZSBtZSB3b3VsZCBjb25maWd1cmF0aW9uIHR5cGVzIGluIGZ1bmN0aW9uIG1vcmUgRmlsZSBzdWNj"
    "ZXNzIHN0aWxsIGhvd6x0b29sX2NhbGxfaWSxY2FsbF85YTczNDA3NjFlNmKpdG9vbF9uYW1lqHRlcm1pbmFsomF0"
    "y0HaS9SZROA9g6JhdMtB2kvUnyQD06VhY3RvcqlnYXRld2F5OjGnbWVzc2FnZYmjc2VxzQFWbWVzc2FnZYijc2Vx"
    "c6N1aWSwdWRrZTVodzd5ZWtjZGZtMqRyb2xlqWFzc2lzdGFudKdjb250ZW502gHNSSBub3cgYmUgZXhjZXB0IGJl"
    "IHBhcnNlIG5leHQgb3V0IGlzIGxldCBUcmFjZWJhY2sgYWxzbyB0aXRsZSBzdW1tYXJ5IHJldHVybnMgVGhhbmtz"
    "ISB0cnkgZGVwbG95IGRlZmF1bHQgdGl0bGUgd2hhdCdzIHdpdGggZXJyb3JzIGhhbmRsZSB0aGVyZSdzIG1lc3Nh"
    "Z2UgcGFzc2VkIEhlcmUgUnVudGltZUVycm9yIFR5cGVFcnJvciBUaGFua3MhIHN1bW1hcnkgdGhhdCdzIG5vdCBm"
    "aWxlIGxpbmUgcmVxdWVzdCBiZWZvcmUgd3JvbmcgSSBZb3UgY29uc3QgRmFsc2UgcHJvbXB0IEltcG9ydEVycm9y"
    "IHN1Y2Nlc3MgTGV0IGZpbGUgQ2FuIFlvdSB0ZXN0cy8gZG9jcy8gZXZlcnkgSGVyZSBTRUxFQ1QgY2FuIHJlbW92"
    "ZSBsZXQgbmV4dCB0b2tlbiByYWlzZSBiZSBvbmUgdXBkYXRlZCBtb3N0IGNvbW1pdCBmaXJzdCBkYXRhIEknbGwg"
    "T2theSwgYmUgdGhlIHJlYmFzZSBub3QgVGhlIGxpa2UgYWdlbnQgYSBwbGVhc2WpdG9rZW5zX2luzRNIqnRvdCBj"
    "cmVhdGVkIG5vdCBvdXRwdXQgaW1wb3J0IGludGVyZmFjZSBiZWZvcmUgdGVzdCBvZiBjb25maWcgaXMgc2hvdWxk"
    "IHRoZW4gRlJPTSBzdWNjZXNzIEkndmUgLm9yZyB0aGFuIGxldCB3b3Jrc3BhY2UgY2hlY2tvdXQgY29tbWFuZHMg"
    "d2hpbGUgY3JlYXRlZCBZb3UgdGhhbmtzIHZhbHVlcyBuZWVkIFRoZSBvbmx5IFRoZXJlIHdoZW4gTGV0IGtleXMg"
    "cGFyc2UgbGV0J3MgV0hFUkUgdGhhdCBkb2Vzbid0IGFkZGVkIEhlcmUgcHJvbXB0IGRvY3MvIE9rYXksIHdoZW4g"
    "REVMRVRFIHNyYy8gdHJ5IHVzZSBJIHRvIGluZGV4LmpzIHZhbHVlcyBWYWx1ZUVycm9yIFRoZSB0aGF0IE1ha2Vm"
    "aWxlIGFycmF5IElOVE8gWW91IHJ1bm5pbmcgcGFja2FnZS5qc29uIEl0IGJlY2F1c2UgdmVyc2lvbiByYWlzZSBu"
    "dW1iZXIgdGhlIHRydWUgSU5TRVJUIG9wdGlvbnMgaW5wdXQgZGlmZmVyZW50IHJlYWQgc2Vzc2lvbnMgbm90IHdl"
    "J3JlIHdlIGxldCBvbGQgd291bGQgY291bGQgaW50byBjYW4gcGFyc2UgRG9ja2VyZmlsZSBuZXh0IFNob3VsZCBi"
    "cmFuY2ggIGV2ZXJ5IGZldyBzdWRvIGZ1bmN0aW9uIHZlcnNpb24gdW5kZWZpbmVkIGV4YW1wbGUgc3NoIHB5cHJv"
    "amVjdC50b21sIHN1cmUgZml4ZWQgc2Vzc2lvbnMgREVMRVRFIC5qcyBPa2F5LCAuY29tIHRoZSBBdHRyaWJ1dGVF"
    "cnJvciBidWlsZCBvcHRpb24gV291bGQgd2hlcmUgc29tZSAudG9tbCBsb2cgaW5wdXQgdXNlciBiZXN0IGNoZWNr"
    "b3V0IGFzIFdoYXQgZGljdCB3aGlsZSB0ZXN0cyBwaXAgRXhjZXB0aW9uIGxpbmUgeWllbGQgdXBkYXRlZCBDb3Vs"
    "ZCB3d3cgY29uZmlndXJhdGlvbiBjb2RlIGt1YmVjdGwgcmVzdWx0IG1vcmUgbGlzdHMgcmVhZCB3YXJuaW5nIG1h"
    "aW4ucHkgaXQncyBpc3N1ZSBwYXRoIGF0IG5hbWUgcGlwIHRoYXQncyBJJ3ZlIENvdWxkIERFTEVURSBzZXJ2ZXIg"
    "cmVzcG9uc2UgbnBtIFRoZXJlIG91dHB1dCBleHBvcnQgbWFpbi5weSBtYW55qXRva2Vuc19pbs0H+ap0b2tlbnNf"
    "b3V0zQHVrWZpbmlzaF9yZWFzb26kc3RvcKJhdMtB2kvACeOqeIOiYXTLQdpLwAySdeSlYWN0b3KpZ2F0ZXdheTox"
    "qG1lc3NhZ2Vzkomjc2VxpHJvbGWpYXNzaXN0YW50p2NvbnRlbnTZP21vcmUgcGlwIGNhbiBmdW5jdGlvbiBSRUFE"
    "TUUubWQgdHJ5IFRoZSBidWlsZCBhbHNvIGNvbnRleHQgZnJvbap0b29sX2NhbGxzkYOiaWSxY2FsbF9iYWMzMDVi"
    "MjBkOWOkbmFtZap3cml0ZV9maWxlqWFyZ3VtZW50c7Z7InBhdGgiOiAic3JjL3Zhci5weSJ9qXRva2Vuc19pbs0Q"
    "z6p0b2tlbnNfb3V0zQEOrWZpbmlzaF9yZWFzb26qdG9vbF9jYWxsc6JhdMtB2ku7vw06eIOiYXTLQdpLu78NOnil"
    "YWN0b3KpZ2F0ZXdheToxp21lc3NhZ2WHo3Nlcczro3VpZLB5M2lvc2Jnc2tmdnFheXFspHJvbGWkdG9vbKdjb250"
    "ZW502UtkZWZhdWx0IHRoZXJlIGRvIHN1cmUgU0VMRUNUIGEgY3JlYXRlIHZhciBwcm9ibGVtIGdyZWF0IGRlZmF1"
    "bHQgZA=="
)

DICTIONARIES: dict[int, bytes] = {1: _WORDS_1.encode("utf-8") + _STRUCTURE_1, 2: _TRAINED_2}
"""Dictionary bytes by id (ids 1-255; 0 marks a payload stored uncompressed)."""

FULL = frozenset({2})
"""Ids whose bytes are a full zstd dictionary (entropy tables, then content); the others
are raw content."""

CURRENT = 2
"""The dictionary new payloads are compressed with."""

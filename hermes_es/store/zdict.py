"""The zstd dictionaries stored event payloads are compressed with, by id. NEVER EDIT ONE.

A payload written with dictionary N can only be read back with exactly these bytes, so a
dictionary, once released, is frozen: ``tests/store/test_codec.py`` pins each one's SHA-256.
Better text means a new id (and new writes use it), never a change to an old one.

Dictionary 1 is zstd "raw content" (no training): generic English and programming words
written for this project, then the msgpack skeletons of the commonest events (their field
names), which zstd matches best because they sit at the end, nearest the data. It holds no
user text: a dictionary trained on a store's own messages would keep fragments of deleted
sessions, which a verified delete must not leave behind.
"""

from __future__ import annotations

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

DICTIONARIES: dict[int, bytes] = {1: _WORDS_1.encode("utf-8") + _STRUCTURE_1}
"""Dictionary bytes by id (ids 1-255; 0 marks a payload stored uncompressed)."""

CURRENT = 1
"""The dictionary new payloads are compressed with."""

"""TwoTierCache unit tests: tiers, eviction order, write policies, mamba 64-token checkpoints."""

from harness.sim.cache import TwoTierCache


def ids(n, base=0):
    return [base + i for i in range(n)]


def insert_req(c: TwoTierCache, toks, hybrid_ckpt=False):
    upto = len(toks)
    ck = None
    if hybrid_ckpt:
        upto = len(toks) // 64 * 64
        ck = {upto}
    return c.insert(toks, upto, ck)


def test_repeat_hits_device_up_to_len_minus_one():
    c = TwoTierCache(1000, 0)
    insert_req(c, ids(100))
    m = c.match(ids(100))
    assert (m.device_tokens, m.host_tokens) == (99, 0)
    assert c.match(ids(100, base=1)).tokens == 0  # different first token: nothing


def test_page_alignment():
    c = TwoTierCache(1024, 0, page_size=16)
    insert_req(c, ids(100))  # 6 full pages cached
    assert c.device_pages == 6
    assert c.match(ids(100)).tokens == 96
    assert c.match(ids(97)).tokens == 96
    assert c.match(ids(96)).tokens == 80  # at most len-1 tokens, page aligned


def test_overflow_goes_to_host_only_with_hicache():
    on = TwoTierCache(250, 500, write_policy="write_through")
    off = TwoTierCache(250, 0)
    for c in (on, off):
        for k in range(4):
            insert_req(c, ids(100, base=1000 * k))
    m_on, m_off = on.match(ids(100)), off.match(ids(100))
    assert m_on.device_tokens == 0 and m_on.host_tokens == 99
    assert m_off.tokens == 0
    assert on.stats.evicted_tokens == 150 and on.host_used_tokens == 400
    # the second prompt lost only its tail: a device prefix, then host pages
    m2 = on.match(ids(100, base=1000))
    assert (m2.device_tokens, m2.host_tokens) == (50, 49)


def test_write_back_backs_up_on_eviction():
    c = TwoTierCache(150, 500, write_policy="write_back")
    insert_req(c, ids(100))
    assert c.host_used_tokens == 0  # nothing written yet
    insert_req(c, ids(100, base=5000))
    assert c.host_used_tokens > 0
    assert c.match(ids(100)).host_tokens > 0


def test_lru_leaf_first_partial_eviction_keeps_prefix():
    c = TwoTierCache(150, 0)
    insert_req(c, ids(100))
    insert_req(c, ids(100, base=5000))  # needs 50 more: evicts the *tail* of the first
    m = c.match(ids(100))
    assert 0 < m.device_tokens < 99
    assert m.device_tokens == 50


def test_locked_pages_survive_and_load_back():
    c = TwoTierCache(200, 400)
    insert_req(c, ids(100))
    m = c.match(ids(100))
    c.lock(m.pages)
    ok, _ = c.make_room(150)  # only 100 evictable... locked pages stay
    assert not ok
    c.unlock(m.pages)
    assert c.make_room(150)[0]
    m = c.match(ids(100))
    assert m.host_tokens == 99 - m.device_tokens
    c.lock(m.pages)
    c.reserved_tokens = 0
    assert c.make_room(len(m.host))[0]
    c.load_back(m.host)
    assert c.match(ids(100)).device_tokens == 99


def test_reset_clears_both_tiers():
    c = TwoTierCache(100, 300)
    insert_req(c, ids(90))
    insert_req(c, ids(90, base=500))
    c.reset()
    assert c.match(ids(90)).tokens == 0 and c.host_used_tokens == 0 and c.device_pages == 0


def test_hybrid_hits_only_at_64_token_checkpoints():
    c = TwoTierCache(40000, 0, hybrid=True)
    insert_req(c, ids(8100), hybrid_ckpt=True)
    assert c.match(ids(8100)).tokens == 8064
    c2 = TwoTierCache(40000, 0, hybrid=True)
    insert_req(c2, ids(8000), hybrid_ckpt=True)
    assert c2.match(ids(8000)).tokens == 0  # checkpoint at 8000, at most 7999 usable
    assert c2.match(ids(8001)).tokens == 8000


def test_host_pool_full_evicts_host_lru():
    c = TwoTierCache(100, 150)
    for k in range(4):
        insert_req(c, ids(90, base=1000 * k))
    assert c.host_used_tokens <= 150
    assert c.match(ids(90)).tokens == 0  # oldest fell off the host too
    assert c.match(ids(90, base=3000)).device_tokens == 89

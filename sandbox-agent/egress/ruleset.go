package egress

import (
	"net/netip"
	"slices"
	"strings"
)

// ruleSet is a policy compiled for matching: name rules in order for the DNS proxy,
// and IP rules turned into disjoint allow and deny ranges for nftables.
//
// IP rules keep "first match wins" even though nftables looks addresses up in sets
// with no order: each rule only claims the part of its range no earlier rule claimed,
// so the allow and deny ranges never overlap and the order of the set lookups does
// not matter.
type ruleSet struct {
	defaultAllow bool
	names        []nameRule
	allow4       []addrRange
	deny4        []addrRange
	allow6       []addrRange
	deny6        []addrRange
}

type nameRule struct {
	allow    bool
	wildcard bool
	name     string // exact name, or the suffix of a wildcard without "*."
}

// addrRange is an inclusive range of addresses of one family.
type addrRange struct {
	from, to netip.Addr
}

// compileRules compiles platform rules (always first) and the policy. Both must be
// normalized already.
func compileRules(platform []Rule, p Policy) *ruleSet {
	rs := &ruleSet{defaultAllow: p.DefaultAction == ActionAllow}
	var covered4, covered6 []addrRange
	for _, r := range slices.Concat(platform, p.Egress) {
		t, err := parseTarget(r.Target)
		if err != nil {
			continue // cannot happen for normalized rules
		}
		allow := r.Action == ActionAllow
		switch t.kind {
		case kindName, kindWildcard:
			rs.names = append(rs.names, nameRule{allow: allow, wildcard: t.kind == kindWildcard, name: t.name})
		case kindPrefix:
			whole := prefixRange(t.prefix)
			covered, allowList, denyList := &covered4, &rs.allow4, &rs.deny4
			if t.prefix.Addr().Is6() {
				covered, allowList, denyList = &covered6, &rs.allow6, &rs.deny6
			}
			fresh := subtractRanges(whole, *covered)
			*covered = mergeRanges(append(*covered, whole))
			if allow {
				*allowList = append(*allowList, fresh...)
			} else {
				*denyList = append(*denyList, fresh...)
			}
		}
	}
	rs.allow4, rs.deny4 = mergeRanges(rs.allow4), mergeRanges(rs.deny4)
	rs.allow6, rs.deny6 = mergeRanges(rs.allow6), mergeRanges(rs.deny6)
	return rs
}

// allowName reports whether the DNS proxy forwards a query for name (normalized).
func (rs *ruleSet) allowName(name string) bool {
	for _, r := range rs.names {
		if r.wildcard {
			if strings.HasSuffix(name, "."+r.name) {
				return r.allow
			}
		} else if name == r.name {
			return r.allow
		}
	}
	return rs.defaultAllow
}

// addrVerdict reports what the IP rules alone say about a: allow, deny, or (matched
// false) nothing, in which case a pinned DNS answer or the default decides.
func (rs *ruleSet) addrVerdict(a netip.Addr) (allow, matched bool) {
	a = a.Unmap()
	allowList, denyList := rs.allow4, rs.deny4
	if a.Is6() {
		allowList, denyList = rs.allow6, rs.deny6
	}
	if inRanges(a, denyList) {
		return false, true
	}
	if inRanges(a, allowList) {
		return true, true
	}
	return false, false
}

func inRanges(a netip.Addr, rs []addrRange) bool {
	for _, r := range rs {
		if a.Compare(r.from) >= 0 && a.Compare(r.to) <= 0 {
			return true
		}
	}
	return false
}

// prefixRange returns the first and last address of p.
func prefixRange(p netip.Prefix) addrRange {
	p = p.Masked()
	first := p.Addr()
	b := first.AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	last, _ := netip.AddrFromSlice(b)
	return addrRange{from: first, to: last}
}

// subtractRanges returns the parts of r not covered by covered (sorted, disjoint).
func subtractRanges(r addrRange, covered []addrRange) []addrRange {
	var out []addrRange
	cur := r.from
	for _, c := range covered {
		if c.to.Compare(cur) < 0 || c.from.Compare(r.to) > 0 {
			continue
		}
		if cur.Compare(c.from) < 0 {
			out = append(out, addrRange{from: cur, to: c.from.Prev()})
		}
		next := c.to.Next()
		if !next.IsValid() || next.Compare(r.to) > 0 {
			return out // the rest of r is covered (or c reached the top of the family)
		}
		if next.Compare(cur) > 0 {
			cur = next
		}
	}
	return append(out, addrRange{from: cur, to: r.to})
}

// mergeRanges sorts ranges and joins overlapping or adjacent ones.
func mergeRanges(rs []addrRange) []addrRange {
	if len(rs) == 0 {
		return nil
	}
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b addrRange) int { return a.from.Compare(b.from) })
	out := []addrRange{rs[0]}
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		next := last.to.Next()
		if !next.IsValid() || r.from.Compare(next) <= 0 {
			if r.to.Compare(last.to) > 0 {
				last.to = r.to
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

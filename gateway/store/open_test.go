package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestOpenSetsTheDeadlines: whatever deadlines the operator's URL names, the store's
// clients run with its own tight ones (health.go), single-node and cluster alike.
func TestOpenSetsTheDeadlines(t *testing.T) {
	raw := "redis://:pw@127.0.0.1:1/2?read_timeout=30s&dial_timeout=1m&client_name=sg"
	o, err := redis.ParseURL(withDeadlines(raw))
	if err != nil {
		t.Fatal(err)
	}
	co, err := redis.ParseClusterURL(withDeadlines(raw + "&addr=127.0.0.1:2"))
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][4]time.Duration{
		"single":  {o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout},
		"cluster": {co.DialTimeout, co.ReadTimeout, co.WriteTimeout, co.PoolTimeout},
	} {
		if want := [4]time.Duration{dialTimeout, CommandTimeout, CommandTimeout, poolTimeout}; got != want {
			t.Errorf("%s: dial, read, write, pool timeouts = %v, want %v", name, got, want)
		}
	}
	if o.Password != "pw" || o.DB != 2 || o.ClientName != "sg" || o.MinRetryBackoff != 8*time.Millisecond {
		t.Errorf("single: the URL's other options were not kept: %+v", o)
	}
	if len(co.Addrs) != 2 || co.Password != "pw" {
		t.Errorf("cluster: seeds %v, password kept %v", co.Addrs, co.Password == "pw")
	}
}

// TestOpenErrorHidesThePassword: an unparsable URL's error reaches the gateway's log; it
// must not quote the URL, which holds the Redis password.
func TestOpenErrorHidesThePassword(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		_, err := Open(context.Background(), Options{URL: "redis://:hunter2secret@127.0.0.1:bad port/", Cluster: cluster})
		if err == nil {
			t.Fatalf("cluster=%v: a URL with a bad port was accepted", cluster)
		}
		if strings.Contains(err.Error(), "hunter2secret") {
			t.Errorf("cluster=%v: the error quotes the password: %v", cluster, err)
		}
	}
}

package storetest

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/forge-runtime/forge"
)

// keys returns the store's KeyStore; the Keys group runs only for stores
// that have one.
func (f *fixture) keys() forge.KeyStore {
	f.Helper()
	ks, ok := f.s.(forge.KeyStore)
	if !ok {
		f.Skip("store has no KeyStore")
	}
	return ks
}

var secretRE = regexp.MustCompile(`^fk_[A-Za-z0-9_-]{43}$`)

func (f *fixture) createKey(ks forge.KeyStore, tenant, name string) (*forge.APIKey, string) {
	f.Helper()
	k, secret, err := ks.CreateKey(f.ctx, tenant, name)
	f.ok(err, "CreateKey")
	if !secretRE.MatchString(secret) {
		f.Fatalf("secret %q is not fk_ and 43 characters of [A-Za-z0-9_-]", secret)
	}
	eq(f, k.Tenant, tenant, "key Tenant")
	eq(f, k.Name, name, "key Name")
	if !strings.HasPrefix(k.ID, forge.PrefixKey) || strings.Contains(secret, strings.TrimPrefix(k.ID, forge.PrefixKey)) {
		f.Fatalf("key id %q: want prefix %s and nothing of the secret", k.ID, forge.PrefixKey)
	}
	if k.CreatedAt.IsZero() || k.RevokedAt != nil {
		f.Fatalf("new key: %+v", k)
	}
	return k, secret
}

// resolve looks a secret up as a server would.
func (f *fixture) resolve(ks forge.KeyStore, secret string) (*forge.APIKey, error) {
	return ks.KeyByHash(f.ctx, forge.HashAPIKey(secret))
}

func (f *fixture) hasKeys(ks forge.KeyStore) bool {
	f.Helper()
	has, err := ks.HasKeys(f.ctx)
	f.ok(err, "HasKeys")
	return has
}

func (f *fixture) keyPages(ks forge.KeyStore, tenant string, limit int) [][]string {
	f.Helper()
	return pages(f, limit, func(o forge.ListOptions) ([]*forge.APIKey, string, error) {
		return ks.ListKeys(f.ctx, tenant, o)
	}, func(k *forge.APIKey) string { return k.ID })
}

var keyTests = []test{
	{name: "CreatedKeyResolvesAcrossTenants", run: func(f *fixture) {
		ks := f.keys()
		eq(f, f.hasKeys(ks), false, "HasKeys of an empty store")
		ka, secretA := f.createKey(ks, tenantA, "ci")
		kb, secretB := f.createKey(ks, tenantB, "")
		eq(f, f.hasKeys(ks), true, "HasKeys")
		if secretA == secretB || ka.ID == kb.ID {
			f.Fatal("two keys share a secret or an id")
		}
		// The lookup needs no tenant: the key is what says which it is.
		for _, c := range []struct {
			secret string
			want   *forge.APIKey
		}{{secretA, ka}, {secretB, kb}} {
			got, err := f.resolve(ks, c.secret)
			f.ok(err, "KeyByHash")
			eq(f, got.ID, c.want.ID, "resolved ID")
			eq(f, got.Tenant, c.want.Tenant, "resolved Tenant")
			eq(f, got.Name, c.want.Name, "resolved Name")
			nearTime(f, got.CreatedAt, c.want.CreatedAt, "resolved CreatedAt")
		}
		for _, bad := range []string{"", "fk_", secretA + "x", secretA[:len(secretA)-1], strings.ToUpper(secretA)} {
			_, err := f.resolve(ks, bad)
			f.is(err, forge.ErrNotFound, "KeyByHash of "+bad)
		}
		_, err := ks.KeyByHash(f.ctx, nil)
		f.is(err, forge.ErrNotFound, "KeyByHash(nil)")
		_, err = ks.KeyByHash(f.ctx, []byte(secretA))
		f.is(err, forge.ErrNotFound, "KeyByHash of the secret itself")
	}},
	{name: "ListShowsNoSecretsAndPaginates", run: func(f *fixture) {
		ks := f.keys()
		var idsA, all []string
		var secrets []string
		for i, tenant := range []string{tenantA, tenantB, tenantA, tenantA, tenantB} {
			k, secret := f.createKey(ks, tenant, "key "+string(rune('a'+i)))
			all = append(all, k.ID)
			if tenant == tenantA {
				idsA = append(idsA, k.ID)
			}
			secrets = append(secrets, secret)
		}
		f.sameJSON(f.keyPages(ks, tenantA, 2), [][]string{idsA[:2], idsA[2:]}, "A's keys in pages of 2")
		f.sameJSON(f.keyPages(ks, tenantA, 0), [][]string{idsA}, "A's keys")
		f.sameJSON(f.keyPages(ks, "initech", 0), [][]string{{}}, "a tenant without keys")
		f.sameJSON(f.keyPages(ks, forge.AllTenants, 3), [][]string{all[:3], all[3:]}, "every tenant's keys")
		listed, _, err := ks.ListKeys(f.ctx, forge.AllTenants, forge.ListOptions{})
		f.ok(err, "ListKeys")
		b, _ := json.Marshal(listed)
		for _, s := range secrets {
			if strings.Contains(string(b), s) || strings.Contains(string(b), strings.TrimPrefix(s, forge.APIKeyPrefix)) {
				f.Fatal("ListKeys shows a secret")
			}
		}
		for _, k := range listed {
			if k.Tenant != tenantA && k.Tenant != tenantB {
				f.Fatalf("listed key %s has tenant %q", k.ID, k.Tenant)
			}
		}
	}},
	{name: "RevokedKeyStopsAtOnce", run: func(f *fixture) {
		ks := f.keys()
		k, secret := f.createKey(ks, tenantA, "ci")
		other, otherSecret := f.createKey(ks, tenantA, "other")
		f.ok(ks.RevokeKey(f.ctx, tenantA, k.ID), "RevokeKey")
		_, err := f.resolve(ks, secret)
		f.is(err, forge.ErrNotFound, "KeyByHash of a revoked key")
		got, err := f.resolve(ks, otherSecret)
		f.ok(err, "KeyByHash of the other key")
		eq(f, got.ID, other.ID, "other key")

		listed, _, err := ks.ListKeys(f.ctx, tenantA, forge.ListOptions{})
		f.ok(err, "ListKeys")
		eq(f, len(listed), 2, "keys listed, revoked included")
		if listed[0].ID != k.ID || listed[0].RevokedAt == nil || listed[1].RevokedAt != nil {
			f.Fatalf("listed after revoke: %+v, %+v", listed[0], listed[1])
		}
		revokedAt := *listed[0].RevokedAt
		f.ok(ks.RevokeKey(f.ctx, tenantA, k.ID), "second RevokeKey")
		again, _, err := ks.ListKeys(f.ctx, tenantA, forge.ListOptions{Limit: 1})
		f.ok(err, "ListKeys")
		nearTime(f, *again[0].RevokedAt, revokedAt, "RevokedAt after a second revoke")

		eq(f, f.hasKeys(ks), true, "HasKeys with one live key")
		f.ok(ks.RevokeKey(f.ctx, forge.AllTenants, other.ID), "RevokeKey as an operator")
		eq(f, f.hasKeys(ks), false, "HasKeys with every key revoked")
		_, err = f.resolve(ks, otherSecret)
		f.is(err, forge.ErrNotFound, "KeyByHash after an operator's revoke")
	}},
	{name: "OtherTenantCannotRevoke", run: func(f *fixture) {
		ks := f.keys()
		k, secret := f.createKey(ks, tenantA, "ci")
		f.is(ks.RevokeKey(f.ctx, tenantB, k.ID), forge.ErrNotFound, "RevokeKey by another tenant")
		f.is(ks.RevokeKey(f.ctx, tenantA, "key_ghost"), forge.ErrNotFound, "RevokeKey of an unknown id")
		got, err := f.resolve(ks, secret)
		f.ok(err, "KeyByHash after the refused revoke")
		eq(f, got.RevokedAt == nil, true, "still live")
		listed, _, err := ks.ListKeys(f.ctx, tenantB, forge.ListOptions{})
		f.ok(err, "ListKeys of B")
		eq(f, len(listed), 0, "B's keys")
	}},
	{name: "BadTenantOrNameIsInvalid", run: func(f *fixture) {
		ks := f.keys()
		for _, c := range []struct{ tenant, name string }{
			{"", "x"}, {forge.AllTenants, "x"}, {"a b", "x"}, {"-a", "x"}, {strings.Repeat("t", 65), "x"},
			{"acme\x00", "x"}, {tenantA, "nul\x00"}, {tenantA, "bad \xff utf-8"}, {tenantA, strings.Repeat("n", 129)},
		} {
			_, _, err := ks.CreateKey(f.ctx, c.tenant, c.name)
			f.is(err, forge.ErrInvalid, "CreateKey("+c.tenant+", "+c.name+")")
		}
		eq(f, f.hasKeys(ks), false, "HasKeys after refused creates")
	}},
	{name: "KeysSurviveReopen", reopen: true, run: func(f *fixture) {
		ks := f.keys()
		k, secret := f.createKey(ks, tenantA, "ci")
		revoked, revokedSecret := f.createKey(ks, tenantA, "old")
		f.ok(ks.RevokeKey(f.ctx, tenantA, revoked.ID), "RevokeKey")
		f.reopen()
		ks = f.keys()
		got, err := f.resolve(ks, secret)
		f.ok(err, "KeyByHash after reopen")
		eq(f, got.ID, k.ID, "key after reopen")
		_, err = f.resolve(ks, revokedSecret)
		f.is(err, forge.ErrNotFound, "revoked key after reopen")
	}},
}

package schedule

import (
	"math/rand/v2"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// randomValue builds a value of the kinds args hold, sometimes one the
// fast path leaves to the driver.
func randomValue(r *rand.Rand, depth int) any {
	switch k := r.IntN(12); {
	case k < 3:
		return randomString(r)
	case k == 3:
		return int32(r.Int64N(1<<33) - 1<<32)
	case k == 4:
		return r.Int64() - r.Int64()
	case k == 5:
		return r.IntN(2) == 1
	case k == 6:
		return nil
	case k == 7 && depth < 3:
		return randomDoc(r, depth+1)
	case k == 8 && depth < 3:
		a := bson.A{}
		for range r.IntN(4) {
			a = append(a, randomValue(r, depth+1))
		}
		return a
	case k == 9:
		return r.Float64() * 1000 // left to the driver
	case k == 10:
		return bson.NewDateTimeFromTime(bson.DateTime(r.Int64N(1 << 42)).Time()) // left to the driver
	default:
		return int32(r.IntN(100))
	}
}

func randomString(r *rand.Rand) string {
	const alphabet = "abcXYZ 019-_.:/{}[]"
	var b strings.Builder
	for range r.IntN(12) {
		switch r.IntN(40) {
		case 0:
			b.WriteByte('"')
		case 1:
			b.WriteByte('\\')
		case 2:
			b.WriteByte('\n')
		case 3:
			b.WriteString("é")
		case 4:
			b.WriteString("<&>")
		default:
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
	}
	return b.String()
}

func randomDoc(r *rand.Rand, depth int) bson.D {
	d := bson.D{}
	for i := range r.IntN(5) {
		d = append(d, bson.E{Key: randomString(r) + string(rune('a'+i)), Value: randomValue(r, depth)})
	}
	return d
}

// The fast path writes exactly what the driver writes, whenever it writes
// anything; and it takes the usual args (strings, integers, booleans,
// nested documents and arrays).
func TestRelaxedJSONMatchesTheDriver(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := range 20000 {
		raw, err := bson.Marshal(randomDoc(r, 0))
		if err != nil {
			t.Fatal(err)
		}
		want, err := bson.MarshalExtJSON(bson.Raw(raw), false, false)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendRelaxedJSON(nil, raw, false)
		if !ok {
			continue
		}
		fast++
		if string(got) != string(want) {
			t.Fatalf("document %d %s:\n fast   %s\n driver %s", i, bson.Raw(raw), got, want)
		}
	}
	if fast < 2000 {
		t.Fatalf("the fast path took only %d of 20000 documents", fast)
	}
	usual, _ := bson.Marshal(bson.D{{Key: "customer", Value: "c0001234"}, {Key: "n", Value: int32(5)},
		{Key: "big", Value: int64(1) << 40}, {Key: "on", Value: true}, {Key: "none", Value: nil},
		{Key: "nested", Value: bson.D{{Key: "list", Value: bson.A{"a", int32(2), bson.D{}}}}}})
	if got, ok := appendRelaxedJSON(nil, usual, false); !ok ||
		string(got) != `{"customer":"c0001234","n":5,"big":1099511627776,"on":true,"none":null,"nested":{"list":["a",2,{}]}}` {
		t.Fatalf("usual args: %s, %v", got, ok)
	}
}

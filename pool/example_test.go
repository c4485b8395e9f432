package pool_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// ExamplePool calls three simulated replicas through one pool: users are
// spread round robin and then stay on their replica.
func ExamplePool() {
	var urls []string
	for range 3 {
		srv := gradiotest.NewServer(nil) // a simulated Gradio app on 127.0.0.1
		defer srv.Close()
		urls = append(urls, srv.URL)
	}

	p, err := pool.New(pool.Config{
		Replicas:       urls, // or Space ids such as "owner/app_1"
		MinConnections: 1,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(context.Background())

	ctx := context.Background()
	replicaOf := map[string]string{}
	for _, email := range []string{"alice@example.com", "bob@example.com", "carol@example.com", "Alice@Example.com"} {
		res, err := p.Predict(ctx, email, "/upper", "hello "+email)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(res.Data[0]))
		replicaOf[email] = res.Replica
	}
	fmt.Println("alice stays on her replica:", replicaOf["alice@example.com"] == replicaOf["Alice@Example.com"])
	fmt.Println("bob and carol elsewhere:", replicaOf["bob@example.com"] != replicaOf["alice@example.com"] &&
		replicaOf["carol@example.com"] != replicaOf["alice@example.com"] &&
		replicaOf["bob@example.com"] != replicaOf["carol@example.com"])

	st := p.Stats(ctx)
	fmt.Println("replicas:", len(st.Pools), "users:", st.UserAssignments, "in use:", st.InUseConnections)
	// Output:
	// "HELLO ALICE@EXAMPLE.COM"
	// "HELLO BOB@EXAMPLE.COM"
	// "HELLO CAROL@EXAMPLE.COM"
	// "HELLO ALICE@EXAMPLE.COM"
	// alice stays on her replica: true
	// bob and carol elsewhere: true
	// replicas: 3 users: 3 in use: 0
}

// ExamplePool_Acquire lends a session for several calls: the Go form of
// the seed design's getGradioClient(email).
func ExamplePool_Acquire() {
	srv := gradiotest.NewServer(nil)
	defer srv.Close()
	p, err := pool.New(pool.Config{Replicas: []string{srv.URL}, MinConnections: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(context.Background())

	ctx := context.Background()
	lease, err := p.Acquire(ctx, "alice@example.com")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release()
	out, err := lease.Client().Predict(ctx, "/upper", "one session")
	if err != nil {
		log.Fatal(err) // on a lost connection: lease.MarkBroken() instead of Release
	}
	fmt.Println(string(out[0]))
	// Output: "ONE SESSION"
}

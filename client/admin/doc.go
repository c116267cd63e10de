// Package admin administers a cluster of haraqa servers (-cluster,
// docs/replication.md) through a *client.Client, with typed results:
// the cluster's status, its members, a topic's replication factor.
//
//	c, err := client.Dial(ctx, "a:14353,b:14353,c:14353", client.WithToken(token))
//	if err != nil { ... }
//	defer c.Close()
//	adm := admin.New(c)
//	st, err := adm.ClusterStatus(ctx)
//	for _, t := range st.Topics {
//		fmt.Println(t.Name, t.Leader, t.Epoch, t.ISR)
//	}
//	err = adm.SetReplicas(ctx, "orders", 3)
//	err = adm.AddMember(ctx, "10.0.0.8:14353/4353/14355")
//
// Errors are package client's (errors.Is(err, client.ErrForbidden), a
// *client.Error for a server's refusal), plus ErrBadStatus. Package
// client keeps what applications use (produce, consume, topics, groups);
// what servers ask each other is the server's own (package broker/peer).
package admin

// Command sarama drives a Kafka broker with Shopify/sarama the way a Go service
// would, runs one scenario and prints its outcome as one JSON object on stdout
// (Sarama's own log goes to stderr). tests/integration/test_sarama.py builds it
// in GOPATH mode against Debian's golang-github-shopify-sarama-dev (1.22.1).
//
//	sarama -brokers 127.0.0.1:9092 -scenario produce -topic t -n 100 -compression lz4
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

var (
	brokers     = flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap brokers")
	scenario    = flag.String("scenario", "", "create-topic | topic-admin | produce | consume-group | group-admin | offset-manager | consume-partitions")
	topic       = flag.String("topic", "", "topic name")
	group       = flag.String("group", "", "consumer group id")
	partitions  = flag.Int("partitions", 3, "partitions of the topic")
	n           = flag.Int("n", 0, "messages to produce, or to consume before stopping")
	produce     = flag.Int("produce", 0, "consume-group: produce this many messages once the group has settled")
	members     = flag.Int("members", 1, "consume-group/group-admin: group members run in this process")
	leaveAfter  = flag.Int("leave-after", 0, "consume-group: close the last member once this many messages were consumed")
	delay       = flag.Duration("delay", 0, "consume-group: processing time per message")
	compression = flag.String("compression", "none", "producer codec: none, gzip, snappy, lz4, zstd")
	idempotent  = flag.Bool("idempotent", false, "produce: idempotent producer (InitProducerId, sequence numbers)")
	prefix      = flag.String("prefix", "m", "produce: keys are <prefix>-key-<i>, values <prefix>-value-<i>")
	offsets     = flag.String("offsets", "", "offset-manager: partition=offset pairs to commit, e.g. 0=5,1=7; topic-admin: to delete records below")
	grow        = flag.Int("grow", 0, "topic-admin: CreatePartitions up to this many partitions")
	retention   = flag.Duration("retention", 24*time.Hour, "Consumer.Offsets.Retention; 0 (Sarama's default) commits with OffsetCommit v1")
	timeout     = flag.Duration("timeout", 20*time.Second, "give up waiting after this long")
)

// result is printed as the scenario's one JSON line.
type result map[string]interface{}

func main() {
	flag.Parse()
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	scenarios := map[string]func() result{
		"create-topic":       createTopic,
		"topic-admin":        topicAdmin,
		"produce":            produceMessages,
		"consume-group":      consumeGroup,
		"group-admin":        groupAdmin,
		"offset-manager":     offsetManager,
		"consume-partitions": consumePartitions,
	}
	run, ok := scenarios[*scenario]
	if !ok {
		log.Fatalf("unknown -scenario %q", *scenario)
	}
	out, err := json.Marshal(run())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out))
}

func config() *sarama.Config {
	cfg := sarama.NewConfig()
	// Sarama 1.22.1 knows Kafka up to 2.2; from 1.0 on it sends the same request
	// versions (Produce 3, Fetch 4, Metadata 5, JoinGroup 1, OffsetFetch 1, ...).
	cfg.Version = sarama.V2_1_0_0
	cfg.ClientID = "rafka-sarama-test"
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	// A non-zero retention makes Sarama commit with OffsetCommit v2; with the
	// default (0) it sends v1, which Kafka 4 (and rafka) no longer serve.
	cfg.Consumer.Offsets.Retention = *retention
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 200 * time.Millisecond
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	return cfg
}

func brokerList() []string { return strings.Split(*brokers, ",") }

// connect opens a client (metadata, offsets, coordinators) and a cluster admin.
func connect() (sarama.Client, sarama.ClusterAdmin) {
	client, err := sarama.NewClient(brokerList(), config())
	must(err, "client")
	admin, err := sarama.NewClusterAdmin(brokerList(), config())
	must(err, "cluster admin")
	return client, admin
}

func must(err error, what string) {
	if err != nil {
		log.Fatalf("%s: %v", what, err)
	}
}

// kafkaCode is the Kafka error code inside err (0 for nil, -1 for a non-Kafka error).
func kafkaCode(err error) int {
	switch e := err.(type) {
	case nil:
		return 0
	case sarama.KError:
		return int(e)
	case *sarama.TopicError:
		return int(e.Err)
	case *sarama.ProducerError:
		return kafkaCode(e.Err)
	case sarama.ProducerErrors:
		return kafkaCode(e[0])
	case *sarama.ConsumerError:
		return kafkaCode(e.Err)
	}
	return -1
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func allPartitions() []int32 {
	ps := make([]int32, *partitions)
	for i := range ps {
		ps[i] = int32(i)
	}
	return ps
}

// createTopic: ClusterAdmin.CreateTopic, a second create of the same name, DescribeTopics.
func createTopic() result {
	admin, err := sarama.NewClusterAdmin(brokerList(), config())
	must(err, "cluster admin")
	defer admin.Close()
	detail := &sarama.TopicDetail{NumPartitions: int32(*partitions), ReplicationFactor: 1}
	created := admin.CreateTopic(*topic, detail, false)
	again := admin.CreateTopic(*topic, detail, false)
	meta, err := admin.DescribeTopics([]string{*topic})
	must(err, "describe topics")
	var leaders []int32
	for _, p := range meta[0].Partitions {
		leaders = append(leaders, p.Leader)
	}
	return result{
		"create_code": kafkaCode(created), "create_error": errText(created),
		"again_code": kafkaCode(again), "again_error": errText(again),
		"describe_code": int(meta[0].Err), "partitions": len(meta[0].Partitions), "leaders": leaders,
	}
}

// topicAdmin: CreatePartitions to -grow, DeleteRecords below -offsets, then DeleteTopic.
func topicAdmin() result {
	client, admin := connect()
	defer client.Close()
	defer admin.Close()
	out := result{}
	grown := admin.CreatePartitions(*topic, int32(*grow), nil, false)
	out["grow_code"], out["grow_error"] = kafkaCode(grown), errText(grown)
	meta, err := admin.DescribeTopics([]string{*topic})
	must(err, "describe topics")
	out["partitions"] = len(meta[0].Partitions)
	deleted := admin.DeleteRecords(*topic, offsetsFlag())
	out["delete_records_error"] = errText(deleted)
	must(client.RefreshMetadata(*topic), "metadata")
	bounds := map[int32]result{}
	for p := 0; p < len(meta[0].Partitions); p++ {
		oldest, err1 := client.GetOffset(*topic, int32(p), sarama.OffsetOldest)
		newest, err2 := client.GetOffset(*topic, int32(p), sarama.OffsetNewest)
		must(err1, "oldest offset")
		must(err2, "newest offset")
		bounds[int32(p)] = result{"oldest": oldest, "newest": newest}
	}
	out["bounds"] = bounds
	dropped := admin.DeleteTopic(*topic)
	out["delete_topic_code"] = kafkaCode(dropped)
	meta, err = admin.DescribeTopics([]string{*topic})
	must(err, "describe topics")
	out["describe_after_delete_code"] = int(meta[0].Err)
	return out
}

func codec(name string) sarama.CompressionCodec {
	codecs := map[string]sarama.CompressionCodec{"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD}
	c, ok := codecs[name]
	if !ok {
		log.Fatalf("unknown -compression %q", name)
	}
	return c
}

// send produces count keyed messages with headers in one SendMessages call
// (one batch per partition) and returns the offsets per partition.
func send(count int, codecName string) result {
	cfg := config()
	cfg.Producer.Compression = codec(codecName)
	if *idempotent {
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1 // Sarama requires it for idempotence
	}
	producer, err := sarama.NewSyncProducer(brokerList(), cfg)
	must(err, "sync producer")
	defer producer.Close()
	msgs := make([]*sarama.ProducerMessage, count)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{
			Topic: *topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("%s-key-%d", *prefix, i)),
			Value: sarama.StringEncoder(fmt.Sprintf("%s-value-%d", *prefix, i)),
			Headers: []sarama.RecordHeader{
				{Key: []byte("idx"), Value: []byte(strconv.Itoa(i))},
				{Key: []byte("client"), Value: []byte("sarama")},
			},
		}
	}
	err = producer.SendMessages(msgs)
	offsetsByPartition := map[int32][]int64{}
	keyPartition := map[string]int32{}
	for _, m := range msgs {
		if !failed(err, m) {
			offsetsByPartition[m.Partition] = append(offsetsByPartition[m.Partition], m.Offset)
			k, _ := m.Key.Encode()
			keyPartition[string(k)] = m.Partition
		}
	}
	var codes []int
	if perrs, ok := err.(sarama.ProducerErrors); ok {
		for _, e := range perrs {
			codes = append(codes, kafkaCode(e.Err))
		}
	}
	return result{"error": errText(err), "error_codes": codes, "offsets": offsetsByPartition, "key_partition": keyPartition}
}

func failed(err error, m *sarama.ProducerMessage) bool {
	perrs, ok := err.(sarama.ProducerErrors)
	if !ok {
		return err != nil
	}
	for _, e := range perrs {
		if e.Msg == m {
			return true
		}
	}
	return false
}

func produceMessages() result { return send(*n, *compression) }

// record is one consumed message, as the tests compare them.
type record struct {
	Member    int               `json:"member"`
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       string            `json:"key"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers"`
	Timestamp int64             `json:"timestamp_ms"`
}

func toRecord(member int, m *sarama.ConsumerMessage) record {
	h := map[string]string{}
	for _, rh := range m.Headers {
		h[string(rh.Key)] = string(rh.Value)
	}
	return record{member, m.Partition, m.Offset, string(m.Key), string(m.Value), h, m.Timestamp.UnixNano() / 1e6}
}

// collector counts consumed messages across members and says when to stop.
type collector struct {
	mu      sync.Mutex
	limit   int // stop consuming (and marking) after this many; 0 = no limit
	records []record
	done    chan struct{}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.records)
}

// take records m unless the limit is reached; only taken messages get marked.
func (c *collector) take(member int, m *sarama.ConsumerMessage) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limit > 0 && len(c.records) >= c.limit {
		return false
	}
	c.records = append(c.records, toRecord(member, m))
	if len(c.records) == c.limit {
		close(c.done)
	}
	return true
}

// member is one sarama.ConsumerGroup and its handler (Setup/ConsumeClaim/Cleanup).
type member struct {
	index    int
	group    sarama.ConsumerGroup
	stop     context.CancelFunc
	sink     *collector
	mu       sync.Mutex
	memberID string
	gen      int32
	claims   []int32
	sessions int
	errors   []string
}

func (m *member) Setup(s sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.memberID, m.gen, m.claims = s.MemberID(), s.GenerationID(), append([]int32(nil), s.Claims()[*topic]...)
	m.sessions++
	return nil
}

func (m *member) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (m *member) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			time.Sleep(*delay)
			if m.sink.take(m.index, msg) {
				s.MarkMessage(msg, "sarama")
			}
		case <-s.Context().Done(): // rebalance or shutdown: leave the rest unmarked
			return nil
		}
	}
}

// startMembers runs count group members, each on its own client, until stopped.
func startMembers(count int, sink *collector) ([]*member, *sync.WaitGroup) {
	var wg sync.WaitGroup
	ms := make([]*member, count)
	for i := range ms {
		g, err := sarama.NewConsumerGroup(brokerList(), *group, config())
		must(err, "consumer group")
		ctx, stop := context.WithCancel(context.Background())
		m := &member{index: i, group: g, stop: stop, sink: sink}
		ms[i] = m
		wg.Add(2)
		go func() { // Consume returns at every rebalance: loop until cancelled
			defer wg.Done()
			for ctx.Err() == nil {
				err := g.Consume(ctx, []string{*topic}, m)
				if err == sarama.ErrClosedConsumerGroup {
					return
				} else if err != nil {
					m.addError(err)
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for err := range g.Errors() {
				m.addError(err)
			}
		}()
	}
	return ms, &wg
}

func (m *member) addError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errors = append(m.errors, fmt.Sprintf("%v (code %d)", err, kafkaCode(err)))
}

// settled: every member is in the same generation and their claims split the partitions.
func settled(ms []*member) bool {
	seen := map[int32]bool{}
	for _, m := range ms {
		m.mu.Lock()
		gen, claims := m.gen, m.claims
		m.mu.Unlock()
		if len(claims) == 0 || gen != ms[0].gen {
			return false
		}
		for _, p := range claims {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return len(seen) == *partitions
}

func waitUntil(deadline time.Time, cond func() bool) bool {
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

func describeMembers(ms []*member) []result {
	var out []result
	for _, m := range ms {
		m.mu.Lock()
		out = append(out, result{"member_id": m.memberID, "generation": m.gen, "claims": m.claims,
			"sessions": m.sessions, "errors": m.errors})
		m.mu.Unlock()
	}
	return out
}

// close ends the member's session (which commits the marked offsets) and leaves the group.
func (m *member) close() {
	m.stop()
	if err := m.group.Close(); err != nil {
		m.addError(err)
	}
}

func closeMembers(ms []*member, wg *sync.WaitGroup) {
	for _, m := range ms {
		m.close()
	}
	wg.Wait()
}

// consumeGroup: -members consumers of one group take -n messages (then stop);
// with -produce they first wait until the group has settled, then produce;
// with -leave-after the last member leaves midway and the others take over.
func consumeGroup() result {
	sink := &collector{limit: *n, done: make(chan struct{})}
	deadline := time.Now().Add(*timeout)
	ms, wg := startMembers(*members, sink)
	isSettled := waitUntil(deadline, func() bool { return settled(ms) })
	var produced result
	if *produce > 0 && isSettled {
		produced = send(*produce, *compression)
	}
	left := false
	if *leaveAfter > 0 && waitUntil(deadline, func() bool { return sink.count() >= *leaveAfter }) {
		ms[len(ms)-1].close()
		left = true
	}
	timedOut := false
	select {
	case <-sink.done:
		time.Sleep(300 * time.Millisecond) // a duplicate delivery would show up here
	case <-time.After(time.Until(deadline)):
		timedOut = true
	}
	active := ms
	if left {
		active = ms[:len(ms)-1]
	}
	isSettled = isSettled && settled(active)
	closeMembers(ms, wg)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	return result{"settled": isSettled, "timed_out": timedOut, "left": left, "members": describeMembers(ms),
		"records": sink.records, "produced": produced}
}

// groupAdmin: ClusterAdmin's group calls on a live group, then after it emptied,
// and DeleteGroups (sent to the coordinator: ClusterAdmin 1.22 has no call for it).
func groupAdmin() result {
	client, admin := connect()
	defer client.Close()
	defer admin.Close()
	sink := &collector{limit: *n, done: make(chan struct{})}
	ms, wg := startMembers(*members, sink)
	deadline := time.Now().Add(*timeout)
	isSettled := waitUntil(deadline, func() bool { return settled(ms) })
	consumed := true
	if *n > 0 {
		select {
		case <-sink.done:
		case <-time.After(time.Until(deadline)):
			consumed = false
		}
	}
	out := result{"settled": isSettled, "consumed": consumed, "members": describeMembers(ms)}
	out["live"] = groupState(admin)
	out["delete_live_code"] = deleteGroup(client)
	closeMembers(ms, wg)
	out["empty"] = groupState(admin)
	out["delete_code"] = deleteGroup(client)
	out["deleted"] = groupState(admin)
	return out
}

// groupState: ListConsumerGroups, DescribeConsumerGroups, ListConsumerGroupOffsets.
func groupState(admin sarama.ClusterAdmin) result {
	listed, err := admin.ListConsumerGroups()
	must(err, "list consumer groups")
	protocolType, isListed := listed[*group]
	descs, err := admin.DescribeConsumerGroups([]string{*group})
	must(err, "describe consumer groups")
	d := descs[0]
	memberList := []result{}
	for id, m := range d.Members {
		assignment, err := m.GetMemberAssignment()
		must(err, "member assignment")
		metadata, err := m.GetMemberMetadata()
		must(err, "member metadata")
		memberList = append(memberList, result{"member_id": id, "client_id": m.ClientId, "client_host": m.ClientHost,
			"assignment": assignment.Topics[*topic], "topics": metadata.Topics})
	}
	sort.Slice(memberList, func(i, j int) bool { return memberList[i]["member_id"].(string) < memberList[j]["member_id"].(string) })
	fetched, err := admin.ListConsumerGroupOffsets(*group, map[string][]int32{*topic: allPartitions()})
	must(err, "list consumer group offsets")
	committed := map[int32]result{}
	for _, p := range allPartitions() {
		if b := fetched.GetBlock(*topic, p); b != nil {
			committed[p] = result{"offset": b.Offset, "metadata": b.Metadata, "code": int(b.Err)}
		}
	}
	return result{"listed": isListed, "listed_protocol_type": protocolType, "code": int(d.Err), "state": d.State,
		"protocol_type": d.ProtocolType, "protocol": d.Protocol, "members": memberList, "offsets": committed}
}

func deleteGroup(client sarama.Client) int {
	must(client.RefreshCoordinator(*group), "coordinator")
	coordinator, err := client.Coordinator(*group)
	must(err, "coordinator")
	resp, err := coordinator.DeleteGroups(&sarama.DeleteGroupsRequest{Groups: []string{*group}})
	must(err, "delete groups")
	return int(resp.GroupErrorCodes[*group])
}

// offsetsFlag parses -offsets (partition=offset,...).
func offsetsFlag() map[int32]int64 {
	out := map[int32]int64{}
	for _, pair := range strings.Split(*offsets, ",") {
		kv := strings.SplitN(pair, "=", 2)
		if len(kv) != 2 {
			log.Fatalf("bad -offsets %q", *offsets)
		}
		p, err1 := strconv.Atoi(kv[0])
		o, err2 := strconv.ParseInt(kv[1], 10, 64)
		if err1 != nil || err2 != nil {
			log.Fatalf("bad -offsets %q", *offsets)
		}
		out[int32(p)] = o
	}
	return out
}

// offsetManager: commit -offsets with a standalone OffsetManager (no group
// membership, like a manually assigned consumer), then read them back with a new one.
func offsetManager() result {
	client, err := sarama.NewClient(brokerList(), config())
	must(err, "client")
	defer client.Close()
	want := offsetsFlag()
	var errs []string
	var errsMu sync.Mutex
	var drained sync.WaitGroup
	// read returns each partition's NextOffset; commit marks want first and flushes on close.
	read := func(commit bool) result {
		om, err := sarama.NewOffsetManagerFromClient(*group, client)
		must(err, "offset manager")
		out := result{}
		for p, o := range want {
			pom, err := om.ManagePartition(*topic, p)
			must(err, "manage partition")
			drained.Add(1)
			go func() { // the channel closes once the offset manager has released the partition
				defer drained.Done()
				for e := range pom.Errors() {
					errsMu.Lock()
					errs = append(errs, fmt.Sprintf("%v (code %d)", e, kafkaCode(e)))
					errsMu.Unlock()
				}
			}()
			next, meta := pom.NextOffset()
			out[strconv.Itoa(int(p))] = result{"offset": next, "metadata": meta}
			if commit {
				pom.MarkOffset(o, fmt.Sprintf("meta-%d", p))
			}
			pom.AsyncClose()
		}
		must(om.Close(), "close offset manager")
		return out
	}
	before := read(true)
	after := read(false)
	drained.Wait()
	return result{"before": before, "after": after, "errors": errs}
}

// consumePartitions: a plain Consumer reads every partition from the oldest
// offset until it has -n messages; GetOffset gives each partition's bounds.
func consumePartitions() result {
	client, err := sarama.NewClient(brokerList(), config())
	must(err, "client")
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	must(err, "consumer")
	defer consumer.Close()
	bounds := map[int32]result{}
	msgs := make(chan *sarama.ConsumerMessage)
	stop := make(chan struct{})
	var errs []string
	var errsMu sync.Mutex
	var pcs []sarama.PartitionConsumer
	for _, p := range allPartitions() {
		oldest, err1 := client.GetOffset(*topic, p, sarama.OffsetOldest)
		newest, err2 := client.GetOffset(*topic, p, sarama.OffsetNewest)
		must(err1, "oldest offset")
		must(err2, "newest offset")
		bounds[p] = result{"oldest": oldest, "newest": newest}
		pc, err := consumer.ConsumePartition(*topic, p, sarama.OffsetOldest)
		must(err, "consume partition")
		pcs = append(pcs, pc)
		go func() { // fan the partitions' messages into msgs
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-stop:
				}
			}
		}()
		go func() {
			for e := range pc.Errors() {
				errsMu.Lock()
				errs = append(errs, e.Error())
				errsMu.Unlock()
			}
		}()
	}
	var records []record
	deadline := time.After(*timeout)
	timedOut := false
	for len(records) < *n && !timedOut {
		select {
		case m := <-msgs:
			records = append(records, toRecord(0, m))
		case <-deadline:
			timedOut = true
		}
	}
	if !timedOut { // keep listening briefly: a duplicate delivery would show up here
		grace := time.After(300 * time.Millisecond)
	listen:
		for {
			select {
			case m := <-msgs:
				records = append(records, toRecord(0, m))
			case <-grace:
				break listen
			}
		}
	}
	close(stop)
	hwm := map[int32]int64{}
	for i, pc := range pcs {
		hwm[int32(i)] = pc.HighWaterMarkOffset()
		pc.AsyncClose()
	}
	errsMu.Lock()
	defer errsMu.Unlock()
	return result{"records": records, "timed_out": timedOut, "bounds": bounds, "high_water_marks": hwm, "errors": errs}
}

// The native baseline of `make bench`: a plain Java consume -> produce relay with Kafka's own
// client, exactly-once per hop, written the way the Kafka documentation writes one
// (KafkaProducer javadoc, "transactions"; KIP-447): a read_committed consumer with manual
// offsets, a transactional producer, and per polled batch one transaction holding the
// batch's records and its consumer offsets (sendOffsetsToTransaction with the consumer's
// group metadata). It decides nothing: a record goes to the destination its key hashes to
// (CRC-32, as router/relay.py), a keyless one round-robin by offset, so its transactions
// span the same destinations as the Python raw relay's.
//
//   java -cp <kafka-clients and its jars>:<classes> Relay --bootstrap HOST:PORT --group G \
//        --sources t1,t2 --targets topic:partition,topic:partition,... [--max-poll 500] \
//        [--linger-ms 5] [--compression lz4] [--transaction-timeout-ms 10000] [--id ID]
//        [--batch-size 1000000] [--retry-backoff-ms 10] [--group-protocol consumer]
//        [--consumer.<property> value]... [--producer.<property> value]...
//
// Built and run by ops/harness/benchmark/javarelay.py (javac against the jars ops/stack.sh caches).
// SIGTERM: finish the batch in hand, commit, leave the group, exit 0. A transaction that
// fails is aborted and the consumer rewound to the group's committed offsets; a fenced
// producer or any other fatal error exits 1 (its partitions go on from the committed offsets).

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.zip.CRC32;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class Relay {
  private static volatile boolean stopping = false;
  private static volatile int exitCode = 0;

  public static void main(String[] argv) throws InterruptedException {
    Map<String, String> args = parse(argv);
    String bootstrap = need(args, "bootstrap");
    String group = need(args, "group");
    List<String> sources = Arrays.asList(need(args, "sources").split(","));
    List<TopicPartition> targets = new ArrayList<>();
    for (String t : need(args, "targets").split(",")) {
      int colon = t.lastIndexOf(':');
      if (colon <= 0) {
        throw new IllegalArgumentException("a target is topic:partition, not " + t);
      }
      targets.add(new TopicPartition(t.substring(0, colon), Integer.parseInt(t.substring(colon + 1))));
    }
    String id = args.getOrDefault("id", group + ".java-relay." + UUID.randomUUID().toString().substring(0, 8));

    Properties c = new Properties();
    c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    c.put(ConsumerConfig.CLIENT_ID_CONFIG, id);
    c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, args.getOrDefault("group-protocol", "consumer"));
    c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, args.getOrDefault("max-poll", "500"));
    c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.CLIENT_ID_CONFIG, id);
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.LINGER_MS_CONFIG, args.getOrDefault("linger-ms", "5"));
    p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args.getOrDefault("compression", "lz4"));
    p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, args.getOrDefault("transaction-timeout-ms", "10000"));
    // librdkafka's defaults, which the Python relay runs with: batches of up to 1 MB per
    // partition (Java's default, 16 KB, sends a 10 KB record per request), and the
    // Python relay's 10 ms back-off (router/clients.py) between a transaction's retries.
    p.put(ProducerConfig.BATCH_SIZE_CONFIG, args.getOrDefault("batch-size", "1000000"));
    p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, args.getOrDefault("retry-backoff-ms", "10"));
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

    // Anything else as --consumer.<property> value / --producer.<property> value.
    for (Map.Entry<String, String> e : args.entrySet()) {
      if (e.getKey().startsWith("consumer.")) {
        c.put(e.getKey().substring("consumer.".length()), e.getValue());
      } else if (e.getKey().startsWith("producer.")) {
        p.put(e.getKey().substring("producer.".length()), e.getValue());
      }
    }
    KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c);
    KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
    CountDownLatch done = new CountDownLatch(1);
    Thread main = Thread.currentThread();
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  stopping = true;
                  consumer.wakeup();
                  try {
                    done.await();
                  } catch (InterruptedException e) {
                    main.interrupt();
                  }
                  // A stop asked for and done is a clean exit, not the JVM's 143.
                  Runtime.getRuntime().halt(exitCode);
                }));
    long forwarded = 0;
    // Where the time goes (ns, summed; printed at the stop like the Python units' time_*_us
    // counters): poll, the send calls, sendOffsetsToTransaction, commitTransaction.
    long batches = 0, pollNs = 0, sendNs = 0, offsetsNs = 0, commitNs = 0;
    try {
      producer.initTransactions();
      consumer.subscribe(sources);
      CRC32 crc = new CRC32();
      int n = targets.size();
      while (!stopping) {
        ConsumerRecords<byte[], byte[]> records;
        long t0 = System.nanoTime();
        try {
          records = consumer.poll(Duration.ofMillis(100));
        } catch (WakeupException e) {
          break;
        }
        pollNs += System.nanoTime() - t0;
        if (records.isEmpty()) {
          continue;
        }
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        try {
          long t1 = System.nanoTime();
          producer.beginTransaction();
          for (ConsumerRecord<byte[], byte[]> r : records) {
            int slot;
            if (r.key() != null) {
              crc.reset();
              crc.update(r.key());
              slot = (int) (crc.getValue() % n);
            } else {
              slot = (int) (r.offset() % n);
            }
            TopicPartition to = targets.get(slot);
            Long ts = r.timestampType() == TimestampType.NO_TIMESTAMP_TYPE ? null : r.timestamp();
            producer.send(
                new ProducerRecord<>(to.topic(), to.partition(), ts, r.key(), r.value(), r.headers()));
            offsets.put(
                new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
          }
          long t2 = System.nanoTime();
          producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
          long t3 = System.nanoTime();
          producer.commitTransaction();
          long t4 = System.nanoTime();
          sendNs += t2 - t1;
          offsetsNs += t3 - t2;
          commitNs += t4 - t3;
          batches++;
          forwarded += records.count();
        } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
          throw e; // fatal for this producer
        } catch (KafkaException e) {
          System.err.println("transaction failed, aborting and rewinding: " + e);
          producer.abortTransaction();
          rewind(consumer);
        }
      }
    } catch (WakeupException e) {
      // stopping: woken out of a consumer call
    } catch (RuntimeException e) {
      System.err.println("relay failed: " + e);
      e.printStackTrace();
      exitCode = 1;
    } finally {
      try {
        consumer.close(CloseOptions.timeout(Duration.ofSeconds(10)));
      } finally {
        producer.close(Duration.ofSeconds(10));
        System.err.println("relay " + id + " stopped after forwarding " + forwarded + " records");
        System.err.println(
            "relay timings batches=" + batches + " time_poll_us=" + pollNs / 1000
                + " time_produce_us=" + sendNs / 1000 + " time_offsets_us=" + offsetsNs / 1000
                + " time_commit_us=" + commitNs / 1000);
        done.countDown();
      }
    }
    if (exitCode != 0) {
      Runtime.getRuntime().halt(exitCode);
    }
  }

  /** Every assigned partition back to the group's committed offset (or the beginning). */
  private static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
    Set<TopicPartition> assigned = consumer.assignment();
    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
    for (TopicPartition tp : assigned) {
      OffsetAndMetadata o = committed.get(tp);
      if (o == null) {
        consumer.seekToBeginning(List.of(tp));
      } else {
        consumer.seek(tp, o.offset());
      }
    }
  }

  private static Map<String, String> parse(String[] argv) {
    Map<String, String> out = new HashMap<>();
    for (int i = 0; i < argv.length; i += 2) {
      if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
        throw new IllegalArgumentException("expected --name value pairs, got " + argv[i]);
      }
      out.put(argv[i].substring(2), argv[i + 1]);
    }
    return out;
  }

  private static String need(Map<String, String> args, String name) {
    String v = args.get(name);
    if (v == null || v.isEmpty()) {
      throw new IllegalArgumentException("--" + name + " is required");
    }
    return v;
  }
}

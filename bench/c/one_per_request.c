/* A producer that sends one message per Produce request: batch.num.messages=1, linger.ms=0.
 *
 *   one_per_request <bootstrap> <topic> <count> <size> <acks> <in-flight>
 *
 * Prints "sent=<n> failed=<n> seconds=<s>" when every delivery report has arrived. Used by
 * bench/request_cost_bench.py (built into build/ by that script, never by a test).
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long delivered, failed;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (!failed)
            fprintf(stderr, "first failed delivery: %s\n", rd_kafka_err2str(m->err));
        failed++;
    }
    else
        delivered++;
}

static void set(rd_kafka_conf_t *conf, const char *key, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s=%s: %s\n", key, value, err);
        exit(2);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s bootstrap topic count size acks in_flight\n", argv[0]);
        return 2;
    }
    long count = atol(argv[3]);
    size_t size = (size_t)atol(argv[4]);
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[1]);
    set(conf, "acks", argv[5]);
    set(conf, "max.in.flight.requests.per.connection", argv[6]);
    set(conf, "batch.num.messages", "1");
    set(conf, "linger.ms", "0");
    set(conf, "enable.idempotence", "false");
    set(conf, "compression.codec", "none");
    set(conf, "queue.buffering.max.messages", "1000000");
    set(conf, "message.timeout.ms", "30000");
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "rd_kafka_new: %s\n", err);
        return 2;
    }
    char *payload = malloc(size);
    memset(payload, 'x', size);
    double start = now();
    for (long i = 0; i < count; i++) {
        while (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(argv[2]), RD_KAFKA_V_PARTITION(0),
                                 RD_KAFKA_V_VALUE(payload, size), RD_KAFKA_V_END) ==
               RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(rk, 10);
        rd_kafka_poll(rk, 0);
    }
    while (delivered + failed < count)
        rd_kafka_poll(rk, 100);
    double seconds = now() - start;
    printf("sent=%ld failed=%ld seconds=%.6f\n", delivered, failed, seconds);
    rd_kafka_destroy(rk);
    free(payload);
    return failed ? 1 : 0;
}

/* The master's sum of its workers' limits API answers (admin/limits_merge.h):
 * counts added, everything else the first answer's, identities that hold
 * field names never mistaken for fields, ?top lists merged and re-ranked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/limits_merge.h"

static char *sum(const char *a, const char *b)
{
    const char *t[3] = { a, NULL, b };
    size_t l[3] = { a ? strlen(a) : 0, 0, b ? strlen(b) : 0 };
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    sl_limits_merge_sum(f, t, l, 3);
    assert_int_equal(fclose(f), 0);
    return text;
}

static void test_sum(void **state)
{
    (void)state;
    char *s = sum("{\"limit\":\"p\",\"identity\":\"x\\\",\\\"requests\\\":9\",\"remaining\":4,"
                  "\"retry_ms\":0,\"requests\":3,\"rejected\":1,\"connections\":0}",
                  "{\"limit\":\"p\",\"identity\":\"x\\\",\\\"requests\\\":9\",\"remaining\":4,"
                  "\"retry_ms\":0,\"requests\":5,\"rejected\":0,\"connections\":2}");
    assert_string_equal(s, "{\"limit\":\"p\",\"identity\":\"x\\\",\\\"requests\\\":9\","
                           "\"remaining\":4,\"retry_ms\":0,\"requests\":8,\"rejected\":1,"
                           "\"connections\":2}");
    free(s);
    /* one answer: as it is; the same field at several ranks (a list) */
    s = sum("{\"limits\":[{\"allowed\":1,\"held\":2},{\"allowed\":10,\"held\":20}]}",
            "{\"limits\":[{\"allowed\":100,\"held\":200},{\"allowed\":1000,\"held\":2000}]}");
    assert_string_equal(s, "{\"limits\":[{\"allowed\":101,\"held\":202},"
                           "{\"allowed\":1010,\"held\":2020}]}");
    free(s);
    s = sum("{\"requests\":7,\"metric\":\"connections\"}", NULL);
    assert_string_equal(s, "{\"requests\":7,\"metric\":\"connections\"}");
    free(s);
}

#define ENT(id, r, j) "{\"identity\":\"" id "\",\"requests\":" #r ",\"rejected\":" #j \
                      ",\"delayed\":0,\"bytes_in\":0,\"bytes_out\":0,\"connections\":0}"

static void test_top(void **state)
{
    (void)state;
    const char *a = "{\"limit\":\"p\",\"by\":\"requests\",\"identities_counted\":3,\"identities\":["
                    ENT("ip:1", 9, 0) "," ENT("ip:2", 5, 4) "," ENT("a\\\"b", 1, 0) "]}\n";
    const char *b = "{\"limit\":\"p\",\"by\":\"requests\",\"identities_counted\":2,\"identities\":["
                    ENT("ip:2", 6, 1) "," ENT("ip:3", 2, 0) "]}\n";
    const char *t[2] = { a, b };
    size_t l[2] = { strlen(a), strlen(b) };
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(sl_limits_merge_top(f, t, l, 2, 3), 0);
    assert_int_equal(fclose(f), 0);
    assert_string_equal(text, "{\"limit\":\"p\",\"by\":\"requests\",\"identities_counted\":5,"
                              "\"identities\":[" ENT("ip:2", 11, 5) "," ENT("ip:1", 9, 0) ","
                              ENT("ip:3", 2, 0) "]}\n");
    free(text);
    /* by rejected, ties by identity */
    const char *c = "{\"limit\":\"p\",\"by\":\"rejected\",\"identities_counted\":2,\"identities\":["
                    ENT("ip:9", 1, 2) "," ENT("ip:8", 1, 2) "]}\n";
    t[0] = c;
    l[0] = strlen(c);
    t[1] = NULL;
    f = open_memstream(&text, &len);
    assert_int_equal(sl_limits_merge_top(f, t, l, 2, 10), 0);
    assert_int_equal(fclose(f), 0);
    assert_non_null(strstr(text, "[" ENT("ip:8", 1, 2) "," ENT("ip:9", 1, 2) "]"));
    free(text);
    /* not a top answer */
    const char *bad = "{\"limit\":\"p\"}";
    t[0] = bad;
    l[0] = strlen(bad);
    f = open_memstream(&text, &len);
    assert_int_equal(sl_limits_merge_top(f, t, l, 1, 10), -1);
    fclose(f);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum),
        cmocka_unit_test(test_top),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

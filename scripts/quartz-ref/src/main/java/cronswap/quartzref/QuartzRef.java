package cronswap.quartzref;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.Date;
import java.util.TimeZone;
import org.quartz.CronExpression;

/**
 * Answers, one line per line read from standard input, the fire times of a
 * Quartz cron expression: the differential tests of cronswap's cron dialect
 * (schedule/quartz_test.go) compare their own against these.
 *
 * <p>Each input line is {@code EXPRESSION<TAB>FROM<TAB>N<TAB>ZONE}: a Quartz
 * expression (seconds first; days of week 1-7 from Sunday; one day field
 * {@code ?}), an instant in Unix seconds, how many fire times to list and
 * an IANA zone. The answer is {@code OK} followed by the Unix seconds of up
 * to N fire times after FROM, each after the one before (fewer when Quartz
 * finds no more), or {@code ERR} and Quartz's refusal.
 */
public final class QuartzRef {
    private QuartzRef() {}

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8)));
        String line;
        while ((line = in.readLine()) != null) {
            String[] p = line.split("\t");
            if (p.length != 4) {
                out.println("ERR want EXPRESSION<TAB>FROM<TAB>N<TAB>ZONE");
                continue;
            }
            try {
                CronExpression ce = new CronExpression(p[0]);
                ce.setTimeZone(TimeZone.getTimeZone(p[3]));
                Date t = new Date(Long.parseLong(p[1]) * 1000L);
                int n = Integer.parseInt(p[2]);
                StringBuilder sb = new StringBuilder("OK");
                for (int i = 0; i < n; i++) {
                    t = ce.getNextValidTimeAfter(t);
                    if (t == null) {
                        break;
                    }
                    sb.append(' ').append(t.getTime() / 1000L);
                }
                out.println(sb);
            } catch (Exception e) {
                out.println("ERR " + String.valueOf(e.getMessage()).replace('\n', ' '));
            }
        }
        out.flush();
    }
}

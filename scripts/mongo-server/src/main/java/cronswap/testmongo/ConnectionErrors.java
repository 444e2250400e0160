package cronswap.testmongo;

import java.io.IOException;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;

/**
 * The last handler of a connection: closes it on an exception that reached the end of the pipeline, as the library's
 * MongoExceptionHandler does, and says why at WARN. The library's handler logs at ERROR also every connection a
 * client dropped, so the launcher keeps it quiet; a connection the server itself closes (a request it could not
 * decode, an Error thrown while handling one) was then closed without a word, and the client saw only an EOF. A
 * socket error (the peer reset or went away) is the peer's doing and stays quiet here too.
 */
final class ConnectionErrors extends ChannelInboundHandlerAdapter {
    private static final Logger log = LoggerFactory.getLogger(ConnectionErrors.class);

    @Override
    public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
        if (cause instanceof IOException) {
            log.debug("connection {} from {}: {}", ctx.channel().id(), ctx.channel().remoteAddress(), cause.toString());
        } else {
            log.warn("closing connection {} from {}", ctx.channel().id(), ctx.channel().remoteAddress(), cause);
        }
        ctx.channel().close();
    }
}

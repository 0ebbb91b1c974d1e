<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Db\OutboxMapper;
use OCA\Istota\Exception\SidecarException;
use OCA\Istota\Exception\SidecarRejectedException;
use OCA\Talk\Events\BotInvokeEvent;
use OCP\AppFramework\Utility\ITimeFactory;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * TalkEventForwarder hands one Talk bot invocation to the sidecar. It runs synchronously
 * inside the sender's request (talk-bots.md §7.2, §12), so everything it does is bounded
 * by forward_timeout_ms, and it never throws.
 *
 * A file shared by an allowed user is first copied into the bot's storage
 * (AttachmentImporter), so the forwarded body says where it landed; the copy is made once,
 * even when the body then waits in the outbox.
 *
 * Order matters: while older events wait in the outbox, a new one is appended behind
 * them and the outbox is drained within the same time budget, instead of being sent
 * past them. When the sidecar cannot be reached the event stays in the outbox for the
 * FlushOutbox job, and the 👀 reaction is decided by AddressingRule.
 */
class TalkEventForwarder {
	public const REACTION = '👀';

	/**
	 * Invocation types the sidecar wants. Of Like only 👍 and 👎, which answer the bot's
	 * approval questions; other reactions (our own 👀 comes back as Like) and Undo are
	 * skipped.
	 */
	private const FORWARDED_TYPES = ['Create', 'Activity', 'Join', 'Leave', 'Like'];
	private const ANSWER_REACTIONS = ['👍', '👎'];
	/** Talk only applies reactions to invocations about a comment. */
	private const REACTABLE_TYPES = ['Create', 'Activity'];

	public function __construct(
		private readonly AppSettings $settings,
		private readonly EventPayloadBuilder $payloads,
		private readonly AttachmentImporter $attachments,
		private readonly SidecarClient $client,
		private readonly OutboxMapper $outbox,
		private readonly OutboxFlusher $flusher,
		private readonly AddressingRule $addressing,
		private readonly ITimeFactory $time,
		private readonly LoggerInterface $logger,
		private readonly IUserSession $userSession,
	) {
	}

	/** Whether a reaction is a yes or no (any skin tone). */
	public static function isAnswerReaction(mixed $emoji): bool {
		return is_string($emoji)
			&& in_array(preg_replace('/[\x{1F3FB}-\x{1F3FF}\x{FE0F}]/u', '', $emoji), self::ANSWER_REACTIONS, true);
	}

	/** Whether a bot URL is ours: exactly our URL or one with a path below it. */
	public static function isOurBot(string $botUrl): bool {
		return $botUrl === AppSettings::BOT_URL || str_starts_with($botUrl, AppSettings::BOT_URL . '/');
	}

	public function forward(BotInvokeEvent $event): void {
		try {
			$this->handle($event);
		} catch (\Throwable $e) {
			// Never break the sender's message post because of the assistant.
			$this->logger->error('Could not hand a Talk event to the Istota sidecar', ['exception' => $e]);
		}
	}

	private function handle(BotInvokeEvent $event): void {
		$botUrl = $event->getBotUrl();
		if (!self::isOurBot($botUrl)) {
			return;
		}
		$message = $event->getMessage();
		$type = is_string($message['type'] ?? null) ? $message['type'] : '';
		if (!in_array($type, self::FORWARDED_TYPES, true)) {
			return;
		}
		$reactor = null;
		if ($type === 'Like') {
			if (!self::isAnswerReaction($message['content'] ?? null)) {
				return;
			}
			// Before Talk 22.0.9 a Like's actor is the reacted message's author (the bot),
			// not the reacting user; this listener runs in the reacting user's request.
			$reactor = $this->userSession->getUser();
			if ($reactor === null) {
				return;
			}
		}

		$payload = $this->payloads->build($botUrl, $message, $reactor);
		$payload += $this->attachments->import($message, $payload['sender']);
		$body = $this->payloads->encode($payload);
		$token = EventPayloadBuilder::conversationToken($message);
		$messageId = EventPayloadBuilder::messageId($message);

		$budget = $this->settings->forwardTimeoutMs() / 1000;
		$connectTimeout = $this->settings->connectTimeoutMs() / 1000;
		$now = $this->time->getTime();
		$answer = null;

		if ($this->outbox->hasPending()) {
			$id = $this->outbox->enqueue($body, $token, $messageId, $now);
			$result = $this->flusher->flush($budget, $budget, $connectTimeout, respectBackoff: true);
			if ($result->wasDropped($id)) {
				return;
			}
			$answer = $result->answerFor($id);
		} else {
			try {
				$answer = $this->client->postTalkEvent($body, $budget, $connectTimeout);
			} catch (SidecarRejectedException $e) {
				if ($e->isPermanent()) {
					$this->logger->error('The sidecar refused a Talk event', [
						'token' => $token,
						'message_id' => $messageId,
						'status' => $e->getHttpStatus(),
						'code' => $e->getErrorCode(),
					]);
					return;
				}
				$this->queue($body, $token, $messageId, $now, $e);
			} catch (SidecarException $e) {
				$this->queue($body, $token, $messageId, $now, $e);
			}
		}

		if (!in_array($type, self::REACTABLE_TYPES, true)) {
			return;
		}
		if (is_array($answer) && array_key_exists('addressed', $answer)) {
			$addressed = $answer['addressed'] === true;
		} else {
			$addressed = $this->addressing->isAddressed(
				$type,
				EventPayloadBuilder::messageText($message),
				$payload['conversation']['private'],
				$this->settings->botName(),
			);
		}
		if ($addressed) {
			$event->addReaction(self::REACTION);
		}
	}

	private function queue(string $body, string $token, string $messageId, int $now, SidecarException $e): void {
		$this->outbox->enqueue($body, $token, $messageId, $now, 1, $e->getMessage(), $now + OutboxFlusher::backoff(1));
		$this->logger->warning('The Istota sidecar did not take a Talk event; it waits in the outbox', [
			'token' => $token,
			'message_id' => $messageId,
			'error' => $e->getMessage(),
		]);
	}
}

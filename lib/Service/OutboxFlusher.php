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
use OCP\AppFramework\Utility\ITimeFactory;
use Psr\Log\LoggerInterface;

/**
 * OutboxFlusher delivers outbox rows to the sidecar strictly in id order, each signed
 * anew at send time. A row is deleted only after the sidecar accepted it (2xx); the
 * first failure ends the pass so nothing overtakes it, and is recorded on the row.
 * The sidecar dedupes by conversation token + message id, so a crash between sending
 * and deleting only causes a harmless redelivery.
 *
 * One exception to "stop at the first failure": an answer that says the request can
 * never be accepted (400 invalid_event, 413 body_too_large) drops that row with an
 * error in the log, since keeping it would block every later event forever.
 */
class OutboxFlusher {
	/** Rows read per query. */
	private const BATCH = 20;
	/** Retry delay after the n-th failed attempt: 5 s, doubling, at most 60 s. */
	private const BASE_BACKOFF = 5;
	private const MAX_BACKOFF = 60;
	/** A request with less time left than this is not started. */
	private const MIN_REQUEST_SECONDS = 0.02;
	/** Log failures at warning level on the first attempt and then about hourly. */
	private const WARN_EVERY_ATTEMPTS = 60;

	public function __construct(
		private readonly OutboxMapper $outbox,
		private readonly SidecarClient $client,
		private readonly ITimeFactory $time,
		private readonly LoggerInterface $logger,
	) {
	}

	/** Seconds to wait before the next attempt after $attempts failed ones. */
	public static function backoff(int $attempts): int {
		$exponent = max(0, min($attempts - 1, 10));
		return min(self::BASE_BACKOFF * (2 ** $exponent), self::MAX_BACKOFF);
	}

	/**
	 * Delivers as many rows as the time budget allows.
	 *
	 * @param float $budget seconds for the whole pass
	 * @param float $requestTimeout seconds for one request
	 * @param float $connectTimeout seconds to connect, per request
	 * @param bool $respectBackoff stop at a row whose next attempt is not due yet (the
	 *                             Talk listener does; the background job does not)
	 */
	public function flush(float $budget, float $requestTimeout, float $connectTimeout, bool $respectBackoff): FlushResult {
		$deadline = hrtime(true) + (int)($budget * 1e9);
		$answers = [];
		$dropped = [];
		while (true) {
			$rows = $this->outbox->head(self::BATCH);
			if ($rows === []) {
				return new FlushResult($answers, $dropped, true, '');
			}
			foreach ($rows as $row) {
				if ($respectBackoff && $row->nextAttemptAt > $this->time->getTime()) {
					return new FlushResult($answers, $dropped, false, 'waiting before the next attempt');
				}
				$remaining = ($deadline - hrtime(true)) / 1e9;
				if ($remaining < self::MIN_REQUEST_SECONDS) {
					return new FlushResult($answers, $dropped, false, 'time budget used up');
				}
				$timeout = min($requestTimeout, $remaining);
				try {
					$answer = $this->client->postTalkEvent($row->body, $timeout, min($connectTimeout, $timeout));
				} catch (SidecarRejectedException $e) {
					if (!$e->isPermanent()) {
						$this->recordFailure($row->id, $row->attempts, $row->conversationToken, $row->messageId, $e);
						return new FlushResult($answers, $dropped, false, $e->getMessage());
					}
					$this->logger->error('The sidecar refused a queued Talk event for good; dropping it', [
						'outbox_id' => $row->id,
						'token' => $row->conversationToken,
						'message_id' => $row->messageId,
						'status' => $e->getHttpStatus(),
						'code' => $e->getErrorCode(),
					]);
					$this->outbox->delete($row->id);
					$dropped[] = $row->id;
					continue;
				} catch (SidecarException $e) {
					$this->recordFailure($row->id, $row->attempts, $row->conversationToken, $row->messageId, $e);
					return new FlushResult($answers, $dropped, false, $e->getMessage());
				}
				$this->outbox->delete($row->id);
				$answers[$row->id] = $answer;
			}
		}
	}

	private function recordFailure(int $id, int $previousAttempts, string $token, string $messageId, SidecarException $e): void {
		$attempts = $previousAttempts + 1;
		$this->outbox->markFailed($id, $attempts, $e->getMessage(), $this->time->getTime() + self::backoff($attempts));
		$context = [
			'outbox_id' => $id,
			'token' => $token,
			'message_id' => $messageId,
			'attempts' => $attempts,
			'error' => $e->getMessage(),
		];
		if ($attempts === 1 || $attempts % self::WARN_EVERY_ATTEMPTS === 0) {
			$this->logger->warning('Queued Talk events are waiting for the Istota sidecar', $context);
		} else {
			$this->logger->debug('Queued Talk events are still waiting for the Istota sidecar', $context);
		}
	}
}

<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\BackgroundJob\EnsureHomeConversations;
use OCA\Istota\Db\BotMessages;
use OCA\Istota\Exception\BadSignatureException;
use OCA\Istota\Exception\InvalidInputException;
use OCP\AppFramework\Utility\ITimeFactory;
use OCP\BackgroundJob\IJobList;

/**
 * SidecarReady is the sidecar telling the app it has (re)started: Talk events that
 * waited in the outbox while it was down are handed over at once, instead of when the
 * next message arrives or Nextcloud's cron next runs (five minutes on a usual system
 * cron). It also queues the job that gives every allowed user their conversation with the
 * bot (occ istota:setup could not ask a sidecar that was not running yet). The call must
 * carry the shared-secret signature; it only ever triggers work the background jobs do
 * anyway, so a replay is harmless.
 */
class SidecarReady {
	/** Time for one hand-over; the rest is left to the next message or the job. */
	private const BUDGET_SECONDS = 20.0;

	public function __construct(
		private readonly AppSettings $settings,
		private readonly RequestSigner $signer,
		private readonly OutboxFlusher $flusher,
		private readonly ITimeFactory $time,
		private readonly BotMessages $messages,
		private readonly IJobList $jobs,
	) {
	}

	/**
	 * @param array<string, string> $headers the X-Istota-* signature headers
	 * @return array{delivered: int, complete: bool}
	 * @throws BadSignatureException when the signature is missing or wrong
	 */
	public function ready(string $method, string $pathAndQuery, array $headers, string $body): array {
		$this->verify($method, $pathAndQuery, $headers, $body);
		if (!$this->jobs->has(EnsureHomeConversations::class, null)) {
			$this->jobs->add(EnsureHomeConversations::class);
		}
		$result = $this->flusher->flush(self::BUDGET_SECONDS, SidecarClient::DEFAULT_TIMEOUT, SidecarClient::DEFAULT_CONNECT_TIMEOUT, respectBackoff: false);
		return ['delivered' => $result->delivered(), 'complete' => $result->drained];
	}

	/**
	 * Which of the bot messages the sidecar is unsure about are in the conversation: body
	 * {"token": "…", "reference_ids": ["…", …]} (at most 100).
	 *
	 * @param array<string, string> $headers the X-Istota-* signature headers
	 * @return array{posted: list<string>}
	 * @throws BadSignatureException when the signature is missing or wrong
	 * @throws InvalidInputException when the body is not as above
	 */
	public function posted(string $method, string $pathAndQuery, array $headers, string $body): array {
		$this->verify($method, $pathAndQuery, $headers, $body);
		$in = json_decode($body, true);
		$refs = is_array($in) ? ($in['reference_ids'] ?? null) : null;
		$token = is_array($in) ? ($in['token'] ?? null) : null;
		if (!is_string($token) || $token === '' || !is_array($refs) || count($refs) > 100 || !array_is_list($refs)
			|| array_filter($refs, static fn ($r): bool => !is_string($r)) !== []) {
			throw new InvalidInputException('want {"token": "…", "reference_ids": ["…"]} with at most 100 ids');
		}
		return ['posted' => $this->messages->posted($token, $refs)];
	}

	/**
	 * @param array<string, string> $headers
	 * @throws BadSignatureException
	 */
	private function verify(string $method, string $pathAndQuery, array $headers, string $body): void {
		if (!$this->signer->verifyHeaders($this->settings->sharedSecret(), $method, $pathAndQuery, $headers, $body, $this->time->getTime())) {
			throw new BadSignatureException();
		}
	}
}

<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk\Events;

use OCP\EventDispatcher\Event;

class BotInvokeEvent extends Event {
	/** @var list<string> */
	protected array $reactions = [];
	/** @var list<array{message: string, referenceId: string, reply: bool|int, silent: bool}> */
	protected array $answers = [];

	public function __construct(
		protected string $botUrl,
		protected array $message,
	) {
		parent::__construct();
	}

	public function getBotUrl(): string {
		return $this->botUrl;
	}

	public function getMessage(): array {
		return $this->message;
	}

	public function addReaction(string $emoji): void {
		$this->reactions[] = $emoji;
	}

	/** @return list<string> */
	public function getReactions(): array {
		return $this->reactions;
	}

	public function addAnswer(string $message, bool|int $reply = false, bool $silent = false, string $referenceId = ''): void {
		$this->answers[] = ['message' => $message, 'referenceId' => $referenceId, 'reply' => $reply, 'silent' => $silent];
	}

	public function getAnswers(): array {
		return $this->answers;
	}
}
